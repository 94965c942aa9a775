"""The package's surface: every native name typed in the stubs (and no stub for a name that
is not there), docstrings that help() shows, exceptions under kcache.Error."""

import ast
import inspect
import pathlib
import pydoc

import kcache
import kcache._kcache as native

STUBS = pathlib.Path(kcache.__file__).with_name("_kcache.pyi")


def stub_names():
    tree = ast.parse(STUBS.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names - {"Part", "Elem", "ExtentLike"}


def test_the_stubs_and_py_typed_ship_with_the_package():
    assert STUBS.is_file()
    assert STUBS.with_name("py.typed").is_file()


def test_every_native_name_is_stubbed_and_every_stub_exists():
    public = {n for n in dir(native) if not n.startswith("_")} | {"__version__"}
    assert public - stub_names() == set()
    assert stub_names() - public == set()


def test_stubbed_methods_exist_on_the_classes():
    tree = ast.parse(STUBS.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(native, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name != "__init__":
                    assert hasattr(cls, item.name), f"{node.name}.{item.name}"


def test_every_public_item_has_a_docstring_and_help_reads():
    for name in kcache.__all__:
        obj = getattr(kcache, name)
        if inspect.isclass(obj) or callable(obj):
            assert (obj.__doc__ or "").strip(), name
    text = pydoc.render_doc(kcache.KernelCache, renderer=pydoc.plaintext)
    assert "compile(" in text and "per kernel" in text
    assert "plain data" in pydoc.render_doc(kcache.ScheduleCache, renderer=pydoc.plaintext)
    assert kcache.__doc__ and "KernelCache" in kcache.__doc__


def test_exceptions_form_one_hierarchy():
    for e in (kcache.CompileError, kcache.SignatureError, kcache.StoreError,
              kcache.ScheduleError, kcache.BackendError):
        assert issubclass(e, kcache.Error) and e.__module__ == "kcache"
    assert kcache.Error.__module__ == "kcache" and issubclass(kcache.Error, Exception)


def test_classes_say_where_they_live():
    for cls in (kcache.Names, kcache.KernelCache, kcache.ScheduleCache, kcache.MemoTable):
        assert cls.__module__ == "kcache"
        assert repr(cls).startswith("<class 'kcache.")


def test_signatures_show_their_real_defaults():
    for name in kcache.__all__:
        obj = getattr(kcache, name)
        if inspect.isclass(obj) or callable(obj):
            text = pydoc.render_doc(obj, renderer=pydoc.plaintext)
            assert "Ellipsis" not in text, name
    assert str(inspect.signature(kcache.canonical_key)) == "(text, kernel_name=None, names=None, extra_parts=())"
    assert "capacity_bytes=67108864" in pydoc.render_doc(kcache.KernelCache, renderer=pydoc.plaintext)
