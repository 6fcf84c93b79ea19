"""The project's YAML reader for every YAML file a user writes (``params.yaml``, prompt sidecars):
YAML 1.2 core-schema scalars as DVC reads them, a repeated key refused, bounded alias expansion,
and errors that name the file and line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from recipematch.errors import RecipematchError, short_repr

FLOAT_12 = re.compile(r"""^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$""", re.X)
_INT_12 = re.compile(r"^[-+]?[0-9]+$|^0o[0-7]+$|^0x[0-9a-fA-F]+$")
_BOOL_12 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars, as DVC (ruamel, YAML 1.2) reads the
    same file: ``1e-06`` is a float, ``040`` is 40 (not octal 32), ``1:00`` and ``yes`` are
    strings; and a key given twice is an error instead of silently taking the last value."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise yaml.constructor.ConstructorError(None, None, f"a key must be a plain scalar, got {short_repr(key, 120)}",
                                                        key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {short_repr(key, 120)}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        value = self.construct_scalar(node)
        if value.startswith("0o"):
            return int(value[2:], 8)
        if value.startswith("0x"):
            return int(value[2:], 16)
        return int(value)


_REPLACED = {"tag:yaml.org,2002:float", "tag:yaml.org,2002:int", "tag:yaml.org,2002:bool"}
_Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag not in _REPLACED]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL_12, list("tTfF"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", _INT_12, list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT_12, list("-+0123456789."))
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)

def yaml_loader() -> type:
    """The project's YAML loader (a SafeLoader: YAML 1.2 scalars, a repeated key refused), for
    every YAML file a user writes (params, prompt sidecars)."""
    return _Loader


def yaml_error_line(path: str | Path, err: Exception) -> str:
    """One line for a YAML syntax error: ``FILE:LINE:COLUMN: not valid YAML: PROBLEM (CONTEXT)``
    (PyYAML's own message spans several lines and quotes the text back).

    Returns:
        the message; line and column are 1-based, left out when PyYAML gives no position.
    """
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}"
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


#: the most a YAML document may hold once its aliases are followed, counted as nodes plus
#: scalar characters (a params file or a prompt sidecar holds a few tens of thousands). Past
#: it the file is refused while loading, before any value is built, hashed or quoted: nine
#: nested levels of nine aliases expand to 387 million nodes from 300 bytes of text.
MAX_YAML_EXPANSION = 2_000_000

#: The largest YAML text read, in characters (params files are ~10,000; a prompt sidecar a
#: few thousand): a longer text is refused before parsing, since the parser builds a node
#: per item before the expansion bound is measured (a 2.4 MB flat list: 70 s, 884 MB).
MAX_YAML_CHARS = 262_144


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_expansion(root: yaml.Node, where: str | Path, limit: int) -> None:
    """Refuse a node tree whose alias-expanded size passes ``limit`` or that refers to
    itself; O(distinct nodes), iterative (no recursion limit)."""
    size: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        k = id(node)
        if done:
            open_.discard(k)
            n = 1 + (len(node.value) if isinstance(node, yaml.ScalarNode) else
                     sum(size[id(c)] for c in _yaml_children(node)))
            size[k] = n
            if n > limit:
                line = node.start_mark.line + 1 if node.start_mark is not None else "?"
                raise RecipematchError(
                    f"{where}:{line}: the value starting here expands, once its aliases (*name) are followed, past "
                    f"{limit:,} nodes and characters; write the value out, or use fewer nested aliases")
            continue
        if k in size:
            continue
        if k in open_:
            line = node.start_mark.line + 1 if node.start_mark is not None else "?"
            raise RecipematchError(f"{where}:{line}: an alias refers to a value that contains it (a recursive value "
                                   f"cannot be a parameter)")
        open_.add(k)
        stack.append((node, True))
        stack.extend((c, False) for c in _yaml_children(node) if id(c) not in size)


def load_yaml_text(text: str, where: str | Path, *, limit: int = MAX_YAML_EXPANSION) -> Any:
    """Parse one YAML document with the project's loader (:func:`yaml_loader`): YAML 1.2
    scalars, a repeated key refused, and aliases bounded: a document that would expand past
    ``limit`` (:data:`MAX_YAML_EXPANSION`) nodes plus scalar characters, or that is recursive,
    is refused before any Python value is built. The one loader of params files and prompt
    sidecars.

    Args:
        text: the document (a leading byte-order mark is dropped).
        where: the file name for messages.

    Returns:
        The value (``None`` for an empty document).

    Raises:
        RecipematchError: longer than :data:`MAX_YAML_CHARS`, a character YAML does not allow,
            not valid YAML (``FILE:LINE:COLUMN``), more than one document, a repeated key,
            nesting too deep to parse, or an alias expansion past ``limit``.
    """
    if len(text) > MAX_YAML_CHARS:
        raise RecipematchError(f"{where}: {len(text):,} characters of YAML, more than the {MAX_YAML_CHARS:,} a params "
                               f"file or prompt sidecar may hold (MAX_YAML_CHARS)")
    try:
        loader = _Loader(text.lstrip("\ufeff"))  # the reader checks characters here: inside the try
    except yaml.YAMLError as e:
        raise RecipematchError(yaml_error_line(where, e)) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, where, limit)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise RecipematchError(yaml_error_line(where, e)) from None
    except RecursionError:
        raise RecipematchError(f"{where}: nested too deeply to read (thousands of levels of brackets)") from None
    except RecipematchError:  # already names the file and the reason (the expansion check)
        raise
    except ValueError as e:  # e.g. an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise RecipematchError(f"{where}: a value cannot be read: {str(e).splitlines()[0][:200]}") from None
    finally:
        loader.dispose()


def load_yaml_file(path: str | Path) -> Any:
    """Read one YAML document from a UTF-8 file through :func:`load_yaml_text` (any top-level value).

    Raises:
        RecipematchError: the file is missing or a folder, not UTF-8, not valid YAML, repeats a key,
            or expands past :data:`MAX_YAML_EXPANSION`.
    """
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise RecipematchError(f"{path}: file does not exist") from None
    except IsADirectoryError:
        raise RecipematchError(f"{path}: is a folder, not a YAML file") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecipematchError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return load_yaml_text(text, path)


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping with YAML 1.2 scalars and bounded aliases (:func:`load_yaml_file`).

    Raises:
        RecipematchError: the file is missing, not valid YAML or UTF-8, repeats a key,
            expands past :data:`MAX_YAML_EXPANSION`, or is not a mapping.
    """
    data = load_yaml_file(path)
    if not isinstance(data, dict):
        raise RecipematchError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data
