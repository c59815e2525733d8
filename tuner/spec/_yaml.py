"""Safe YAML loading that remembers where every value came from.

Why our own loader: error messages must name file, line and column for any field, and two
YAML 1.1 traps must not reach the user: ``1e-3`` silently parsed as a *string*, and a
duplicated key silently overriding the first one.

A study file may also be hostile (or just broken): a few lines of aliases can expand to billions
of nodes ("billion laughs") and a few thousand ``[`` nest deeper than Python's recursion limit.
Both are stopped *while composing*, by counting nodes (an alias counts as the whole tree it
stands for) and depth, so the answer is one located line within a fraction of a second.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from tuner.errors import SpecError
from tuner.spec._paths import Path_, format_path


class _DuplicateKey(SpecError):
    """A duplicated key; ``key_node`` lets the document-level code name the field it is in."""

    def __init__(self, message: str, key_node: yaml.Node) -> None:
        super().__init__(message, line=key_node.start_mark.line + 1, column=key_node.start_mark.column + 1)
        self.key_node = key_node


#: Far beyond any real study file (a few hundred nodes, five or six levels), far below harm.
MAX_NODES = 20_000
MAX_DEPTH = 64


class _StudyLoader(yaml.SafeLoader):
    """SafeLoader + exponent floats without a dot (``1e-3``) + an error on duplicate keys
    + bounded size and depth (counted as the composer builds the tree, before anything expands).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._expanded = 0  # nodes so far, each alias counted as the size of what it refers to
        self._sizes: dict[int, int] = {}  # id(node) -> expanded size, for finished anchored nodes
        # id(node) -> height once expanded: an alias nests what it refers to where it stands, so
        # a chain of anchors each nested a little deeper is as deep as its expansion, not its text
        self._heights: dict[int, int] = {}
        self._child_heights: list[int] = [0]  # per node being composed: its tallest child so far

    def _too_much(self, message: str) -> SpecError:
        mark = self.peek_event().start_mark
        return SpecError(message, line=mark.line + 1, column=mark.column + 1)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            size = self._sizes.get(id(node))
            if size is None:
                raise SpecError(
                    f"the alias *{event.anchor} refers to a value that contains it (a recursive alias)",
                    line=event.start_mark.line + 1,
                    column=event.start_mark.column + 1,
                )
            self._expanded += size
            if self._expanded > MAX_NODES:
                raise SpecError(
                    f"aliases expand this file to more than {MAX_NODES} values; "
                    "a study file needs far fewer (is it a 'billion laughs' file?)",
                    line=event.start_mark.line + 1,
                    column=event.start_mark.column + 1,
                )
            height = self._heights.get(id(node), 1)
            if self._depth + height > MAX_DEPTH:
                raise SpecError(
                    f"the alias *{event.anchor} nests this file more than {MAX_DEPTH} levels deep; "
                    "a study file needs a handful",
                    line=event.start_mark.line + 1,
                    column=event.start_mark.column + 1,
                )
            self._child_heights[-1] = max(self._child_heights[-1], height)
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise self._too_much(f"nested more than {MAX_DEPTH} levels deep; a study file needs a handful")
        self._expanded += 1
        if self._expanded > MAX_NODES:
            raise self._too_much(f"more than {MAX_NODES} values; a study file needs far fewer")
        before = self._expanded
        self._child_heights.append(0)
        node = super().compose_node(parent, index)
        height = self._child_heights.pop() + 1
        self._child_heights[-1] = max(self._child_heights[-1], height)
        self._sizes[id(node)] = self._expanded - before + 1
        self._heights[id(node)] = height
        self._depth -= 1
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as error:
            # e.g. `2024-13-45` read as a date, `!!int abc`: a located error, not a crash
            raise SpecError(
                f"cannot read this value: {error}",
                line=node.start_mark.line + 1,
                column=node.start_mark.column + 1,
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise SpecError(
                    "a mapping key must be a plain value, not a list or mapping",
                    line=key_node.start_mark.line + 1,
                    column=key_node.start_mark.column + 1,
                )
            if key in seen:
                raise _DuplicateKey(f"duplicate key {key!r} (the second one would silently win)", key_node)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StudyLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


@dataclass
class Positions:
    """(line, column), 1-based, of every key and value in the document, by path."""

    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def of(self, path: Path_, *, key: bool = False) -> tuple[int, int] | None:
        """Best position for ``path``: the value (or key), else the nearest known ancestor."""
        table = self.keys if key else self.values
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if prefix in table:
                return table[prefix]
            if prefix in self.keys:
                return self.keys[prefix]
        return None


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _walk(loader: _StudyLoader, node: yaml.Node, path: Path_, positions: Positions) -> None:
    positions.values[path] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            child = (*path, key)
            positions.keys[child] = _mark(key_node)
            _walk(loader, value_node, child, positions)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(loader, item, (*path, index), positions)


def _path_to(loader: _StudyLoader, node: yaml.Node, target: yaml.Node, path: Path_ = ()) -> Path_ | None:
    """The path of the key ``target`` in the tree under ``node`` (None if it is not there)."""
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            child = (*path, loader.construct_object(key_node))
            if key_node is target:
                return child
            found = _path_to(loader, value_node, target, child)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found = _path_to(loader, item, target, (*path, index))
            if found is not None:
                return found
    return None


def load_yaml_with_positions(text: str, source: str) -> tuple[Any, Positions]:
    """Parse ``text``; raise a located ``SpecError`` for syntax errors and unsafe tags."""
    try:
        loader = _StudyLoader(text)  # checks the characters already
    except yaml.reader.ReaderError as error:
        raise _unreadable(error, text, source) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Positions()
        data = loader.construct_document(node)
        positions = Positions()
        _walk(loader, node, (), positions)
        return data, positions
    except SpecError as error:
        field_path = _path_to(loader, node, error.key_node) if isinstance(error, _DuplicateKey) else None
        raise SpecError(
            error.detail,
            path=source,
            line=error.line,
            column=error.column,
            field=format_path(field_path) if field_path else None,
        ) from None
    except yaml.constructor.ConstructorError as error:
        mark = error.problem_mark
        tag = re.search(r"'(tag:[^']*|![^']*)'", str(error.problem))
        what = tag.group(1).replace("tag:yaml.org,2002:", "!!") if tag else "this tag"
        raise SpecError(
            f"{what} is not allowed: study files are loaded with yaml.safe_load (plain data only)",
            path=source,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = " ".join(str(p) for p in (error.context, error.problem) if p)
        raise SpecError(
            f"invalid YAML: {problem}",
            path=source,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from None
    except yaml.reader.ReaderError as error:
        raise _unreadable(error, text, source) from None
    except yaml.YAMLError as error:
        raise SpecError(f"invalid YAML: {' '.join(str(error).split())}", path=source) from None
    finally:
        loader.dispose()


def _unreadable(error: yaml.reader.ReaderError, text: str, source: str) -> SpecError:
    """A character YAML does not allow (NUL, other control characters): binary, most likely."""
    before = text[: error.position]
    line, column = before.count("\n") + 1, error.position - (before.rfind("\n") + 1) + 1
    character = f"U+{error.character:04X}" if isinstance(error.character, int) else repr(error.character)
    return SpecError(
        f"not a text study file: character {character} is not allowed in YAML",
        path=source,
        line=line,
        column=column,
    )


def parse_scalar(text: str) -> Any:
    """A ``--set key=value`` value, read the way the study file would read it.

    Text that is not valid YAML stays a string; a hostile value (aliases, deep nesting) or a
    duplicated key raises ``SpecError`` with the problem, which the caller names the ``--set`` in.
    """
    if not text.strip():
        return ""
    try:
        loader = _StudyLoader(text)
    except yaml.YAMLError:
        return text
    try:
        return loader.get_single_data()
    except yaml.YAMLError:
        return text
    finally:
        loader.dispose()
