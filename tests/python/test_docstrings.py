"""Docstrings of the public Python API in DeepEP's style, checked on the CPU without torch: the
modules are parsed with `ast`, never imported. Every public class has a docstring; every public
function or method (dunders included) has one that opens with a summary line, lists each of its
parameters under `Arguments:` (in signature order, no others), and has a `Returns:` section exactly
when it returns a value. Runs under pytest, or as `python3 tests/python/test_docstrings.py` (ctest:
no pytest needed)."""
import ast
import inspect
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
API_FILES = ["python/anyep/buffer.py", "python/anyep/config.py", "python/anyep/event.py", "python/anyep/utils.py",
             "python/anyep/elastic.py", "python/anyep/elastic_plan.py", "python/anyep/ep_math.py"]
MODULE_FILES = API_FILES + ["python/anyep/__init__.py", "python/deep_ep/__init__.py", "python/deep_ep/buffer.py",
                            "python/deep_ep/utils.py", "python/deep_ep/_C.py"]
SECTIONS = ("Arguments", "Returns", "Raises", "Attributes")


def is_public(name):
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def sections(doc):
    """{section name: [entry names]} of a cleaned docstring, plus "" -> the summary line."""
    lines = inspect.cleandoc(doc).splitlines()
    out = {"": lines[0].strip() if lines else ""}
    current = None
    for line in lines[1:]:
        header = re.fullmatch(r"(\w+):", line)
        if header and header.group(1) in SECTIONS:
            current = header.group(1)
            if current in out:
                raise AssertionError(f"section {current}: appears twice")
            out[current] = []
        elif line and not line.startswith(" "):
            current = None  # prose after a section
        elif current:
            entry = re.match(r"    (\*{0,2}\w+): \S", line)
            if entry:
                out[current].append(entry.group(1).lstrip("*"))
    return out


def parameters(fn, is_method):
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    if is_method and not static and names:
        names = names[1:]  # self / cls
    names += [a.vararg.arg] if a.vararg else []
    names += [x.arg for x in a.kwonlyargs]
    names += [a.kwarg.arg] if a.kwarg else []
    return names


def returns_value(fn):
    """A `return <value>` in fn's own body (nested functions and classes not counted)."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return) and node.value is not None:
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def annotated_none(fn):
    return fn.returns is None or (isinstance(fn.returns, ast.Constant) and fn.returns.value is None)


def problems_of_function(fn, is_method, where):
    doc = ast.get_docstring(fn, clean=False)
    if not doc:
        return [f"{where}: no docstring"]
    try:
        s = sections(doc)
    except AssertionError as e:
        return [f"{where}: {e}"]
    found = []
    if not s[""] or s[""].rstrip(":") in SECTIONS:
        found.append(f"{where}: the docstring does not open with a summary line")
    params = parameters(fn, is_method)
    listed = s.get("Arguments")
    if params and listed is None:
        found.append(f"{where}: no Arguments: section for {params}")
    elif listed is not None and listed != params:
        found.append(f"{where}: Arguments: lists {listed}, the signature has {params}")
    if returns_value(fn) and not s.get("Returns"):
        found.append(f"{where}: returns a value but has no Returns: section with an entry")
    if not returns_value(fn) and annotated_none(fn) and "Returns" in s:
        found.append(f"{where}: returns nothing but has a Returns: section")
    return found


def problems_of_source(text, filename):
    """Every docstring problem of the public API in one module's source text."""
    tree = ast.parse(text, filename)
    found = []
    if not ast.get_docstring(tree):
        found.append(f"{filename}: no module docstring")

    def visit(body, prefix, in_class):
        for node in body:
            if isinstance(node, ast.ClassDef) and is_public(node.name):
                if not ast.get_docstring(node):
                    found.append(f"{filename}: class {prefix}{node.name}: no docstring")
                visit(node.body, f"{prefix}{node.name}.", True)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_public(node.name):
                found.extend(problems_of_function(node, in_class, f"{filename}: {prefix}{node.name}"))

    visit(tree.body, "", False)
    return found


def public_functions(text):
    return [n.name for n in ast.walk(ast.parse(text)) if isinstance(n, ast.FunctionDef) and is_public(n.name)]


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


# ---- the API -----------------------------------------------------------------------------------
def test_api_docstrings():
    found = []
    for rel in API_FILES:
        found.extend(problems_of_source(read(rel), rel))
    assert not found, "\n".join(found)


def test_module_docstrings():
    missing = [rel for rel in MODULE_FILES if not ast.get_docstring(ast.parse(read(rel)))]
    assert not missing, f"no module docstring: {missing}"


def test_the_api_is_where_the_check_looks():
    # A parse that found nothing would pass vacuously: Buffer's DeepEP methods must be seen.
    names = set(public_functions(read("python/anyep/buffer.py")))
    for name in ("__init__", "low_latency_dispatch", "low_latency_combine", "get_low_latency_rdma_size_hint",
                 "clean_low_latency_buffer", "get_next_low_latency_combine_buffer", "destroy"):
        assert name in names, f"Buffer.{name} not found in python/anyep/buffer.py"
    assert "current_stream_wait" in public_functions(read("python/anyep/event.py"))
    assert "get_rdma_buffer_size_hint" in public_functions(read("python/anyep/config.py"))


# ---- the DeepEP V1 surface (deep_ep at commit 567632d) ---------------------------------------------
# Buffer's constructor parameters in deep_ep's order (keyword callers and positional ones both work).
DEEPEP_INIT = ["group", "num_nvl_bytes", "num_rdma_bytes", "low_latency_mode", "num_qps_per_rank",
               "allow_nvlink_for_low_latency_mode", "allow_mnnvl", "use_fabric", "explicitly_destroy",
               "enable_shrink", "comm"]
DEEPEP_METHODS = ["destroy", "is_sm90_compiled", "set_num_sms", "capture", "get_low_latency_rdma_size_hint",
                  "get_comm_stream", "get_local_buffer_tensor", "get_dispatch_config", "get_combine_config",
                  "get_dispatch_layout", "dispatch", "combine", "internode_dispatch", "internode_combine",
                  "clean_low_latency_buffer", "low_latency_dispatch", "low_latency_combine",
                  "low_latency_update_mask_buffer", "low_latency_query_mask_buffer", "low_latency_clean_mask_buffer",
                  "get_next_low_latency_combine_buffer"]
DEEPEP_NAMES = ["Buffer", "Config", "EventOverlap", "topk_idx_t", "EventHandle", "check_nvlink_connections",
                "__version__"]


def class_methods(text, cls):
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
    raise AssertionError(f"class {cls} not found")


def test_buffer_has_deepep_constructor_and_methods():
    methods = class_methods(read("python/anyep/buffer.py"), "Buffer")
    assert parameters(methods["__init__"], True) == DEEPEP_INIT, parameters(methods["__init__"], True)
    missing = [m for m in DEEPEP_METHODS if m not in methods]
    assert not missing, f"Buffer lacks deep_ep's {missing}"


def test_deep_ep_exports_deepep_names():
    tree = ast.parse(read("python/deep_ep/__init__.py"))
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    missing = [n for n in DEEPEP_NAMES if n not in imported]
    assert not missing, f"deep_ep does not export {missing}"
    for sub, names in (("buffer", ["Buffer"]), ("utils", ["EventOverlap", "EventHandle", "check_nvlink_connections"])):
        tree = ast.parse(read(f"python/deep_ep/{sub}.py"))
        got = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert set(names) <= got, f"deep_ep.{sub} lacks {set(names) - got}"


# ---- the checker itself --------------------------------------------------------------------------
GOOD = '''"""m."""
class A:
    """A class."""
    def f(self, x, *rest, y=1, **kw) -> int:
        """
        Summary.

        Arguments:
            x: the x.
            rest: more.
            y: the y,
                continued.
            kw: options.

        Returns:
            n: a number.
        """
        def inner():
            return 3
        return x
    def g(self) -> None:
        """Nothing to say but this."""
    @staticmethod
    def h(a):
        """
        Static.

        Arguments:
            a: the a.
        """
    def _private(self, q):
        pass
'''


def test_checker_accepts_a_good_module():
    assert problems_of_source(GOOD, "good.py") == []


def test_checker_finds_each_kind_of_problem():
    cases = {
        "no docstring": GOOD.replace('        """Nothing to say but this."""\n', "        pass\n"),
        "no Arguments: section": GOOD.replace("        Arguments:\n            a: the a.\n", ""),
        "Arguments: lists": GOOD.replace("            rest: more.\n", ""),
        "the signature has": GOOD.replace("            x: the x.\n", "            x: the x.\n            z: no such.\n"),
        "no Returns: section": GOOD.replace("        Returns:\n            n: a number.\n", ""),
        "returns nothing but": GOOD.replace('"""Nothing to say but this."""',
                                            '"""\n        Nothing.\n\n        Returns:\n            r: x.\n        """'),
        "summary line": GOOD.replace('"""\n        Static.\n', '"""\n        Arguments:\n'),
        "class A: no docstring": GOOD.replace('    """A class."""\n', ""),
        "no module docstring": GOOD.replace('"""m."""\n', ""),
    }
    for what, text in cases.items():
        found = problems_of_source(text, "bad.py")
        assert any(what in p for p in found), f"the checker missed '{what}': {found}"


if __name__ == "__main__":
    tests = [(n, f) for n, f in sorted(globals().items()) if n.startswith("test_") and callable(f)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASSED {name}")
        except AssertionError as e:
            failed += 1
            print(f"FAILED {name}\n{e}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
