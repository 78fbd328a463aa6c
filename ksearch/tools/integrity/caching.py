"""Output caching and fingerprinting: outputs replayed from a cache keyed by an input, instead of computed.

Rule: ``output_caching``. Data flow is followed per function, flow-insensitively: the names bound to an input or to
a view of it (``x, mask, weights, config = data``, ``x.contiguous()``), keys derived from an input's identity or
content (``data_ptr``, ``id``, ``hash``, ``hashlib``...), persistent containers (module level, ``global``, mutable
defaults) and the input dicts themselves. Derived weights cached in the weights dict under a constant key pass;
``functools.lru_cache`` on a helper of ints passes, on the entry point or on a function given a tensor it does not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ksearch.tools.integrity.base import Finding, ScannerBase
from ksearch.tools.integrity.compute_vocabulary import (
    CACHE_DECORATORS,
    FINGERPRINT_BUILTINS,
    FINGERPRINT_CALLS,
    FINGERPRINT_METHODS,
    SHAPE_ATTRS,
    TENSOR_ATTRS,
)
from ksearch.tools.integrity.vocabulary import matches


class CachingRules(ScannerBase):
    self_test: set[int]
    cached_functions: dict[str, ast.AST]
    """Functions memoised by ``functools.lru_cache``/``cache``, by name (set once by ``Scanner``)."""

    def _cached_functions(self) -> dict[str, ast.AST]:
        """Functions memoised by functools.lru_cache/cache (decorated, or wrapped: ``f = functools.cache(g)``)."""
        cached: dict[str, ast.AST] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(matches(self.resolve(d), CACHE_DECORATORS) for d in node.decorator_list):
                    cached[node.name] = node
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and matches(self.resolve(node.value.func), CACHE_DECORATORS)
            ):
                cached.update((t.id, node) for t in node.targets if isinstance(t, ast.Name))
        return cached

    def _memoised_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Finding]:
        if node.name in self.entry_points or node.name == "forward":
            for decorator in node.decorator_list:
                name = self.resolve(decorator)
                if matches(name, CACHE_DECORATORS):
                    yield self.finding("output_caching", node, f"the entry point {node.name} is memoised by {name}")
        elif node.name in self.cached_functions:
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for arg in arguments + [a for a in (node.args.vararg, node.args.kwarg) if a is not None]:
                if arg.annotation is not None and self._is_tensor_annotation(arg.annotation):
                    yield self.finding(
                        "output_caching",
                        node,
                        f"{node.name} is memoised but takes a tensor ({arg.arg}): lru_cache keys tensors by identity",
                    )
                    break

    def _is_tensor_annotation(self, annotation: ast.expr) -> bool:
        for node in ast.walk(annotation):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "Tensor" in node.value:
                return True
            if isinstance(node, (ast.Name, ast.Attribute)) and (self.resolve(node) or "").split(".")[-1] == "Tensor":
                return True
        return False

    def _caching(self) -> Iterator[Finding]:
        """Outputs replayed from a cache instead of computed. In every function, with *inputs* its parameters and
        the names bound to them or to views of them (``x, mask, weights, config = data``, ``x2 = x.contiguous()``;
        never through ``.shape``/``.dtype``/``.device``/``[...]``, which describe or look up):

        - a persistent container (module level, ``global`` or a mutable default) or an input container (the
          weights dict) looked up or filled with a key derived from an input's identity or content (data_ptr, id,
          hash, bytes, hashlib...), or with the input itself;
        - a memoised function (``functools.lru_cache``/``cache``) called with an input or such a key;
        - the entry point returning, straight out of a container, the value it stored there (``C[k] = y; ...;
          return C[k]``), or a value an input container holds under a constant key the module stores into it
          (``weights["_out"]``). Derived *weights* cached in the weights dict under a constant key are fine."""
        functions = [
            f
            for f in ast.walk(self.tree)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and id(f) not in self.self_test
        ]
        scopes = []
        stored_keys: set[object] = set()
        tensors = self._tensor_params(functions)
        for function in functions:
            params = {a.arg for a in function.args.posonlyargs + function.args.args + function.args.kwonlyargs}
            params -= self.containers
            inputs = params | self._input_aliases(function, params)
            scopes.append((function, inputs))
            for _container, key, _value, _node in self._input_stores(function, inputs):
                if isinstance(key, ast.Constant):
                    stored_keys.add(key.value)
        parameters = self._parameter_names(functions, {id(f): inputs for f, inputs in scopes})
        for function, inputs in scopes:
            tainted = set(inputs)
            from_parameters = set(parameters[id(function)])
            for _ in range(3):  # propagate through local assignments
                for node in ast.walk(function):
                    if isinstance(node, ast.Assign) and self._fingerprint(node.value, tainted, inputs):
                        tainted.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
                        if self._roots(node.value, tainted | inputs) <= from_parameters:
                            from_parameters.update(name for t in node.targets for name in self._bound(t))
            keyed = {n for n in tainted if n not in inputs}
            held = tensors[id(function)]
            yield from self._keyed_caches(
                function, inputs, keyed, held | self._input_aliases(function, held), from_parameters
            )
            if function.name in self.entry_points:
                yield from self._replayed_outputs(function, inputs, stored_keys)

    def _parameter_names(self, functions: list, inputs_of: dict[int, set[str]]) -> dict[int, set[str]]:
        """Per function, the names that hold parameters rather than activations: in the entry point, the names its
        ``data`` unpacks to at the task's ``data_parameters`` positions (``x, mask, weights, config = data``), and
        names assigned from those alone; in a helper, a parameter every caller passes such a name (or no input at
        all) for. Empty when the task declares no parameter positions."""
        names: dict[int, set[str]] = {id(f): set() for f in functions}
        if not self.data_parameters:
            return names
        by_name = {f.name: f for f in functions}
        for f in functions:
            if f.name not in self.entry_points:
                continue
            args = [a.arg for a in f.args.posonlyargs + f.args.args]
            if not args:
                continue
            data = args[0]
            for node in ast.walk(f):
                if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id == data):
                    continue
                for target in node.targets:
                    if isinstance(target, (ast.Tuple, ast.List)) and not any(
                        isinstance(e, ast.Starred) for e in target.elts
                    ):
                        names[id(f)].update(
                            e.id
                            for i, e in enumerate(target.elts)
                            if isinstance(e, ast.Name) and i in self.data_parameters
                        )
        for _ in range(3):  # names assigned from parameters alone; helpers called with them
            for f in functions:
                known, inputs = names[id(f)], inputs_of[id(f)]
                for node in ast.walk(f):
                    if isinstance(node, ast.Assign) and known and self._roots(node.value, inputs | known) <= known:
                        if self._roots(node.value, inputs | known):
                            known.update(name for t in node.targets for name in self._bound(t))
            for callee in functions:
                if callee.name in self.entry_points:
                    continue
                positional = [a.arg for a in callee.args.posonlyargs + callee.args.args]
                verdicts: dict[str, bool] = {}
                for f in functions:
                    known, inputs = names[id(f)], inputs_of[id(f)]
                    for call in ast.walk(f):
                        if not (
                            isinstance(call, ast.Call)
                            and isinstance(call.func, ast.Name)
                            and call.func.id == callee.name
                        ):
                            continue
                        passed = dict(zip(positional, call.args)) | {k.arg: k.value for k in call.keywords if k.arg}
                        for name in positional:
                            arg = passed.get(name)
                            ok = arg is None or self._roots(arg, inputs | known) <= known
                            verdicts[name] = verdicts.get(name, True) and ok
                if by_name.get(callee.name) is callee:
                    names[id(callee)].update(n for n, ok in verdicts.items() if ok and n in inputs_of[id(callee)])
        return names

    @classmethod
    def _bound(cls, target: ast.expr) -> set[str]:
        """The names an assignment target binds (``a``, ``a, b``), not those it only reads (``table[key] = ...``)."""
        if isinstance(target, ast.Name):
            return {target.id}
        if isinstance(target, (ast.Tuple, ast.List)):
            return {name for element in target.elts for name in cls._bound(element)}
        if isinstance(target, ast.Starred):
            return cls._bound(target.value)
        return set()

    @staticmethod
    def _roots(expr: ast.AST, watched: set[str]) -> set[str]:
        """The watched names (inputs, keys, parameters) an expression reads."""
        return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in watched}

    def _keyed_caches(
        self, function: ast.AST, inputs: set[str], keyed: set[str], tensors: set[str], from_parameters: set[str]
    ) -> Iterator[Finding]:
        for node in ast.walk(function):
            key = self._container_key(node)
            if key is not None:
                container, expr = key
                roots = self._roots(expr, inputs | keyed)
                if roots and roots <= from_parameters:
                    continue  # derived weights cached by the weights' identity (``data_parameters``)
                if self._fingerprint(expr, keyed, inputs) or self._is_input(expr, inputs):
                    yield self.finding(
                        "output_caching", node, f"{container} is keyed by an input's identity or content"
                    )
                    return
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.cached_functions:
                for arg in list(node.args) + [k.value for k in node.keywords]:
                    if self._fingerprint(arg, keyed, inputs) or self._is_input(arg, tensors):
                        yield self.finding(
                            "output_caching",
                            node,
                            f"{node.func.id} is memoised and called with an "
                            "input or its identity (lru_cache keys tensors by identity)",
                        )
                        return
        for container, key, _value, node in self._input_stores(function, inputs):
            if self._fingerprint(key, keyed, inputs) or self._is_input(key, inputs):
                yield self.finding(
                    "output_caching", node, f"{container} (an input) is keyed by an input's identity or content"
                )
                return

    def _replayed_outputs(self, function: ast.AST, inputs: set[str], stored_keys: set[object]) -> Iterator[Finding]:
        returns = [n for n in ast.walk(function) if isinstance(n, ast.Return) and n.value is not None]
        returned = {root for r in returns if (root := self._chain_root(r.value)) is not None}
        holders = self.containers | inputs
        stored_outputs: set[str] = set()  # containers the entry point puts its own output in
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                value_root = self._chain_root(node.value)
                for target in node.targets:
                    if (
                        isinstance(target, ast.Subscript)
                        and isinstance(target.value, ast.Name)
                        and (target.value.id in holders and (names & returned or value_root in returned))
                    ):
                        stored_outputs.add(target.value.id)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in holders
                and node.func.attr in ("setdefault", "__setitem__", "update")
                and len(node.args) >= 2
                and self._chain_root(node.args[1]) in returned
            ):
                stored_outputs.add(node.func.value.id)
        for ret in returns:
            lookup = self._lookup(ret.value)
            if lookup is None:
                continue
            container, key = lookup
            if container in stored_outputs:
                yield self.finding("output_caching", ret, f"returns the output it stored in {container}")
                return
            if container in inputs and isinstance(key, ast.Constant) and key.value in stored_keys:
                yield self.finding(
                    "output_caching", ret, f"returns {container}[{key.value!r}], a value cached in an input container"
                )
                return

    def _tensor_params(self, functions: list) -> dict[int, set[str]]:
        """Per function, the parameters that hold tensors (or the entry point's data): all of an entry point's; a
        helper's when annotated as a tensor, used through a tensor-only attribute, or passed a tensor by a caller."""
        by_name = {f.name: f for f in functions}
        held: dict[int, set[str]] = {}
        for f in functions:
            args = f.args.posonlyargs + f.args.args + f.args.kwonlyargs
            names = {a.arg for a in args}
            if f.name in self.entry_points:
                held[id(f)] = set(names)
                continue
            held[id(f)] = {a.arg for a in args if a.annotation is not None and self._is_tensor_annotation(a.annotation)}
            held[id(f)] |= {
                n.value.id
                for n in ast.walk(f)
                if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id in names
                and n.attr in TENSOR_ATTRS
            }
        for _ in range(3):  # callers pass tensors on
            for f in functions:
                inputs = held[id(f)] | self._input_aliases(f, held[id(f)])
                for call in ast.walk(f):
                    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                        continue
                    callee = by_name.get(call.func.id)
                    if callee is None:
                        continue
                    positional = [a.arg for a in callee.args.posonlyargs + callee.args.args]
                    for name, arg in zip(positional, call.args):
                        if self._is_input(arg, inputs):
                            held[id(callee)].add(name)
                    for kw in call.keywords:
                        if kw.arg and self._is_input(kw.value, inputs):
                            held[id(callee)].add(kw.arg)
        return held

    def _input_stores(self, function: ast.AST, inputs: set[str]) -> Iterator[tuple[str, ast.expr, ast.expr, ast.AST]]:
        """(container, key, value, node) for each write into an input container:
        ``w[k] = v``, ``w.setdefault(k, v)``."""
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for element in ast.walk(target):
                        if (
                            isinstance(element, ast.Subscript)
                            and isinstance(element.ctx, ast.Store)
                            and isinstance(element.value, ast.Name)
                            and element.value.id in inputs
                        ):
                            yield element.value.id, element.slice, node.value, node
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in inputs
                and node.func.attr in ("setdefault", "__setitem__")
                and len(node.args) >= 2
            ):
                yield node.func.value.id, node.args[0], node.args[1], node

    def _input_aliases(self, function: ast.AST, params: set[str]) -> set[str]:
        aliases: set[str] = set()
        for _ in range(3):
            for node in ast.walk(function):
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                if self._chain_root(value, stop_at_lookup=True) in params | aliases:
                    for target in targets:
                        aliases.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        return aliases

    @staticmethod
    def _chain_root(expr: ast.AST, *, stop_at_lookup: bool = False) -> str | None:
        """The name at the root of an attribute/method chain (``y.float().view(...)`` -> ``y``); None through a
        describing attribute (``x.shape``) or, with ``stop_at_lookup``, through a subscript."""
        node = expr
        while True:
            if isinstance(node, ast.Name):
                return node.id
            if isinstance(node, ast.Attribute):
                if node.attr in SHAPE_ATTRS:
                    return None
                node = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                node = node.func
            elif isinstance(node, ast.Subscript) and not stop_at_lookup:
                node = node.value
            else:
                return None

    def _lookup(self, expr: ast.AST) -> tuple[str, ast.expr] | None:
        """(container, key) when ``expr`` is ``C[k]`` or ``C.get(k)``/``C.setdefault(k, ...)``/``C.pop(k)``, possibly
        followed by method calls (``C[k].clone()``)."""
        node = expr
        while True:
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                return node.value.id, node.slice
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.attr in ("get", "setdefault", "pop")
                and node.args
            ):
                return node.func.value.id, node.args[0]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                node = node.func.value
            elif isinstance(node, ast.Attribute):
                node = node.value
            else:
                return None

    def _container_key(self, node: ast.AST) -> tuple[str, ast.expr] | None:
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in self.containers:
            return node.value.id, node.slice
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, ast.Name) and right.id in self.containers:
                    return right.id, node.left
                if isinstance(op, (ast.Is, ast.Eq, ast.IsNot, ast.NotEq)):
                    sides = [node.left, right]
                    for i, side in enumerate(sides):
                        if isinstance(side, ast.Name) and side.id in self.containers:
                            return side.id, sides[1 - i]
                        if (
                            isinstance(side, ast.Subscript)
                            and isinstance(side.value, ast.Name)
                            and (side.value.id in self.containers)
                        ):
                            return side.value.id, sides[1 - i]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.containers
            and node.func.attr
            in ("get", "setdefault", "pop", "__contains__", "__getitem__", "__setitem__", "add", "append", "update")
            and node.args
        ):
            return node.func.value.id, node.args[0]
        return None

    def _fingerprint(self, expr: ast.AST, tainted: set[str], params: set[str]) -> bool:
        for node in ast.walk(expr):
            if isinstance(node, ast.Name) and node.id in tainted and node.id not in params:
                return True
            if isinstance(node, ast.Call):
                name = self.resolve(node.func) or ""
                if matches(name, FINGERPRINT_CALLS):
                    return True
                if isinstance(node.func, ast.Attribute) and node.func.attr in FINGERPRINT_METHODS:
                    if any(isinstance(n, ast.Name) and n.id in params | tainted for n in ast.walk(node.func.value)):
                        return True
                if (
                    self.is_builtin(node.func, FINGERPRINT_BUILTINS)
                    and any(self._is_input(a, params) or self._fingerprint(a, tainted, params) for a in node.args)
                    and (
                        self.is_builtin(node.func, frozenset({"id", "hash"})) is not None
                        or any(self._fingerprint(a, tainted, params) for a in node.args)
                    )
                ):
                    return True  # a builtin of an input with no fingerprint in it ends nothing: its siblings are walked
            if (
                isinstance(node, ast.Attribute)
                and node.attr in FINGERPRINT_METHODS
                and isinstance(node.value, ast.Name)
            ):
                if node.value.id in params:
                    return True
        return False

    @staticmethod
    def _is_input(expr: ast.AST, params: set[str]) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in params
        if isinstance(expr, ast.Tuple):
            return any(isinstance(e, ast.Name) and e.id in params for e in expr.elts)
        return False
