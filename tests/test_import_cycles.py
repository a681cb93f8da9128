"""No import circle inside the trainer or the shapers: module A importing B while B imports A (at any level,
TYPE_CHECKING and function-level imports included, as test_layers reads them)."""

from test_layers import ROOT, imports_of, module_name


def _graph():
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}
    return {
        m: {x for x in imports_of(p.read_text(), m, is_package=p.name == "__init__.py") if x in modules and x != m}
        for m, p in modules.items()
    }


def _cycles(edges):
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(root):
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def test_the_checker_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_circle_in_the_trainer_or_the_shapers():
    watched = ("dynashape.train", "dynashape.shapers")
    found = [c for c in _cycles(_graph()) if any(m.startswith(watched) for m in c)]
    assert found == []


def test_the_losses_do_not_import_the_train_config():
    assert "dynashape.train.config" not in _graph()["dynashape.losses.registry"]
