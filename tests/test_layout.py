"""The package's layout: the design card's paths, and modules that import in one direction."""

import ast
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(ROOT, "sebulba")


def _modules() -> dict[str, str]:
    """Dotted module name -> file, for every module of the package."""
    modules = {}
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                modules[dotted.removesuffix(".__init__")] = path
    return modules


def _is_main_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and getattr(getattr(test, "left", None), "id", "") == (
        "__name__"
    )


def _imported_names(tree: ast.AST):
    """Every absolute import in the module, at any depth (function-level ones too), but
    those of an `if __name__ == "__main__":` block (a command's entry point)."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if _is_main_block(node):
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        pending.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def owner(name: str) -> str | None:  # `sebulba.x.attr` -> the module `sebulba.x`.
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        targets = {owner(name) for name in _imported_names(tree) if name.startswith("sebulba")}
        # A package's own parents are imported by Python anyway; they are not edges.
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_two_modules_import_each_other_even_lazily():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_design_cards_paths_hold():
    # The card's envs.py lives in its package: sebulba/environments/envpool_pools.py.
    for path in ("main.py", "train.py", "mesh.py", "pipeline.py", "checkpoint.py"):
        assert os.path.isfile(os.path.join(PACKAGE, path)), path
    assert os.path.isfile(os.path.join(PACKAGE, "environments", "envpool_pools.py"))
    assert os.path.isfile(os.path.join(PACKAGE, "agents", "__init__.py"))


def test_the_architecture_docs_map_every_module():
    """docs/architecture.md's module table names each module (or its folder) and no
    module that is gone."""
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        listed = set(re.findall(r"^\| `(sebulba/[^`]+)`", f.read(), re.M))
    documented_folders = tuple(path for path in listed if path.endswith("/"))
    missing = []
    for path in _modules().values():
        relative = os.path.relpath(path, ROOT)
        is_package = relative.endswith("__init__.py")
        if is_package and relative != os.path.join("sebulba", "config", "__init__.py"):
            continue  # A package's map is its folder's row or its modules' rows.
        if relative not in listed and not relative.startswith(documented_folders):
            missing.append(relative)
    assert missing == []
    assert [path for path in listed if not os.path.exists(os.path.join(ROOT, path))] == []


# A module a reader can hold in mind: past this, split it by job (docs/architecture.md).
MAX_MODULE_LINES = 800


def test_no_module_is_longer_than_a_reader_can_hold():
    lengths = {}
    for module, path in _modules().items():
        with open(path, encoding="utf-8") as f:
            lengths[module] = sum(1 for _ in f)
    assert {m: n for m, n in lengths.items() if n > MAX_MODULE_LINES} == {}
