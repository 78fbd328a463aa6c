"""Verified optimisation skills (after KLineage, arXiv 2605.28213), below the search: it uses them, they never
import it.

``records`` (what a skill is), ``features`` (static checks against code), ``evidence`` (the log and everything
derived from it: estimate, status), ``snapshot`` (what a run may use), ``exchange`` (the export format), ``library``
(the workspace's skills as typed records; the SQL is ``ksearch.store.skills``), ``retrieval`` (which skills a planning
step sees, and as what text), ``lifting`` (a verified change into a skill, by the ``skill_lifter`` role) and ``walk``
(KLineage's backward walk over an expert kernel). The search's side (the planner's section, bindings, trials) is
``ksearch.agent.skill_use``.
"""
