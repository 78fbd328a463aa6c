"""The search's wiring, above the nodes it wires: the outer graph, the cycle subgraph it fans out to with Send,
and the two routers (typed with their successors, so LangGraph can draw them).

    START -> setup -> plan -> edit_tree -+-> Send(cycle) x N -> prune -> hardware_counters -> learn_skills -> plan ...
                               ^   |     +-> plan (the script was invalid: repair)
                               +---+     +-> END (nothing left to run)
    cycle: write_kernel -> compile -> profile -> (write_kernel | finish_cycle)

The cycle is compiled WITHOUT ``checkpointer=True`` (that would make parallel branches share one checkpoint
namespace and swap results after a resume) and with an output schema holding only the reducer key.
Every node is wrapped by ``traced``: ``node.start`` / ``node.end`` log events and the stop check of Ctrl-C / SIGTERM.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from ksearch.agent.context import SearchContext
from ksearch.agent.node_events import traced
from ksearch.agent.state import CycleOutput, CycleState, SearchState
from ksearch.nodes.compile import compile_candidate
from ksearch.nodes.edit_tree import edit_tree
from ksearch.nodes.finish_cycle import finish_cycle
from ksearch.nodes.hardware_counters import hardware_counters
from ksearch.nodes.learn_skills import learn_skills
from ksearch.nodes.plan import plan
from ksearch.nodes.profile import profile
from ksearch.nodes.prune import prune
from ksearch.nodes.setup import setup
from ksearch.nodes.write_kernel import write_kernel


def route_after_profile(state: CycleState) -> Literal["write_kernel", "finish_cycle"]:
    """Another round of the cycle unless it has a stop reason."""
    return "finish_cycle" if state.stop_reason else "write_kernel"


def route_after_prune(state: SearchState) -> Literal["plan", "__end__"]:
    """Plan again unless the search is done (``"__end__"`` is LangGraph's END)."""
    return "__end__" if state.done_reason else "plan"


def build_cycle_graph() -> CompiledStateGraph:
    g = StateGraph(CycleState, context_schema=SearchContext, output_schema=CycleOutput)
    g.add_node("write_kernel", traced("write_kernel", write_kernel))
    g.add_node("compile", traced("compile", compile_candidate))
    g.add_node("profile", traced("profile", profile))
    g.add_node("finish_cycle", traced("finish_cycle", finish_cycle))
    g.add_edge(START, "write_kernel")
    g.add_edge("write_kernel", "compile")
    g.add_edge("compile", "profile")
    g.add_conditional_edges("profile", route_after_profile, ["write_kernel", "finish_cycle"])
    g.add_edge("finish_cycle", END)
    return g.compile()


def build_search_graph(checkpointer: Checkpointer = None) -> CompiledStateGraph:
    g = StateGraph(SearchState, context_schema=SearchContext)
    g.add_node("setup", traced("setup", setup))
    g.add_node("plan", traced("plan", plan))
    g.add_node("edit_tree", traced("edit_tree", edit_tree))
    g.add_node("cycle", build_cycle_graph())
    g.add_node("prune", traced("prune", prune))
    g.add_node("hardware_counters", traced("hardware_counters", hardware_counters))
    g.add_node("learn_skills", traced("learn_skills", learn_skills))
    g.add_edge(START, "setup")
    g.add_edge("setup", "plan")
    g.add_edge("plan", "edit_tree")
    g.add_edge("cycle", "prune")
    g.add_edge("prune", "hardware_counters")
    g.add_edge("hardware_counters", "learn_skills")
    g.add_conditional_edges("learn_skills", route_after_prune, ["plan", END])
    return g.compile(checkpointer=checkpointer)
