"""Edits to a YAML file's text that keep everything else as it was, byte for byte.

``--write-next`` writes a copy of the user's study file with a few values changed. Everything
the user wrote around them (comments, blank lines, indentation, quoting, flow or block style)
must survive, so the file is never re-emitted: each edit finds its place in the node tree that
PyYAML composes (where every value starts and ends), changes only those characters or lines,
and is checked by reading the text back with the study loader: the document must have changed
exactly as intended, or the edit is refused (``NotEditable``) and the text is left as it was.

Why not a round-trip library (ruamel.yaml): it re-emits the whole file, so it re-indents a file
whose indentation is not uniform and realigns end-of-line comments; and it attaches a comment to
the item before it, so a removed list item takes the next item's comment with it, and a key
inserted before another lands under that key's comment.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tuner.errors import SpecError
from tuner.spec._yaml import load_yaml_with_positions

Path_ = tuple[str | int, ...]
_PLAIN = re.compile(r"[A-Za-z_./][A-Za-z0-9_./:+-]*")


class NotEditable(Exception):
    """This edit cannot be made in place (the value is an alias, not in the file...)."""


@dataclass
class _Step:
    container: yaml.Node  # a mapping or sequence
    key: yaml.Node | None  # the key's node (mappings)
    value: yaml.Node


def same_value(a: Any, b: Any) -> bool:
    """Equal as YAML values: ``True`` is not ``1``, a tuple equals the list it would be written as."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return bool(a == b)


def scalar_text(value: Any, like: str | None = None) -> str:
    """``value`` as a YAML scalar the study loader reads back as the same value.

    ``like`` is the text it replaces: its quoting is kept for a string, its exponent style
    (``1.0e-3``) for a number. A float is written as the shortest text that reads back as it.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotEditable(f"{value} is not a number a study file holds")
        shortest = repr(value)
        small = value != 0 and abs(value) < 0.1  # 1.0e-2 in a file written that way; 0.3 never
        if "e" in shortest or (small and like is not None and "e" in like.lower()):
            return _exponent_text(value)
        return shortest
    if isinstance(value, str):
        quote = like[:1] if like and like[:1] in ("'", '"') else ""
        if not quote and _PLAIN.fullmatch(value) and _reads_as(value) == value:
            return value
        if quote == "'":
            return "'" + value.replace("'", "''") + "'"
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise NotEditable(f"cannot write {value!r} as one YAML value")


def _exponent_text(value: float) -> str:
    """``1.0e-3``, ``2.5e+2``: the style of hand-written study files (the loader reads both signs)."""
    for digits in range(17):
        text = f"{value:.{digits}e}"
        if float(text) == value:
            break
    mantissa, exponent = text.split("e")
    if "." not in mantissa:
        mantissa += ".0"
    power = int(exponent)
    return f"{mantissa}e{'-' if power < 0 else '+'}{abs(power)}"


def _reads_as(text: str) -> Any:
    try:
        document, _ = load_yaml_with_positions(f"v: {text}\n", "<value>")
    except SpecError:
        return None
    return document.get("v") if isinstance(document, dict) else None


class YamlText:
    """A YAML document's text and the in-place edits made to it (see the module doc)."""

    def __init__(self, text: str, source: str = "<study file>") -> None:
        self.source = source
        self.newline = "\r\n" if "\r\n" in text else "\n"
        self.text = text
        self.document = self._load(text)

    # -- reading -------------------------------------------------------------------------------
    def _load(self, text: str) -> Any:
        document, _ = load_yaml_with_positions(text, self.source)
        return document

    def get(self, path: Path_) -> tuple[bool, Any]:
        """``(True, value)`` when ``path`` is in the document, else ``(False, None)``."""
        node: Any = self.document
        for part in path:
            in_dict = isinstance(node, dict) and part in node
            in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
            if not (in_dict or in_list):
                return False, None
            node = node[part]
        return True, node

    def _steps(self, path: Path_) -> list[_Step]:
        """The nodes along ``path``, as far as it goes in the text."""
        node = yaml.compose(self.text, Loader=yaml.SafeLoader)
        steps: list[_Step] = []
        for part in path:
            if isinstance(node, yaml.MappingNode):
                found = next(
                    (
                        (k, v)
                        for k, v in node.value
                        if isinstance(k, yaml.ScalarNode) and k.value == str(part)
                    ),
                    None,
                )
                if found is None:
                    break
                steps.append(_Step(node, found[0], found[1]))
                node = found[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                steps.append(_Step(node, None, node.value[part]))
                node = node.value[part]
            else:
                break
        return steps

    def anchor(self, path: Path_) -> Path_:
        """Where a comment about ``path`` goes: the deepest key on the path that starts its own
        line (a key inside a one-line ``{type: float, low: ...}`` has its mapping's key's line)."""
        anchor: Path_ = ()
        for depth, step in enumerate(self._steps(path)):
            if step.container.flow_style:
                break
            anchor = path[: depth + 1]
        return anchor

    # -- editing -------------------------------------------------------------------------------
    def _commit(self, text: str, expected: Any, what: str) -> None:
        try:
            document = self._load(text)
        except SpecError as error:
            raise NotEditable(f"{what}: the edited file would not read back ({error})") from None
        if not same_value(document, expected):
            raise NotEditable(f"{what}: cannot be edited in place (a YAML alias or tag?)")
        self.text, self.document = text, document

    def _expected(self, path: Path_, change: Any) -> Any:
        expected = copy.deepcopy(self.document)
        parent = expected
        for part in path[:-1]:
            parent = parent[part]
        change(parent, path[-1])
        return expected

    def set(self, path: Path_, value: Any, *, after: Sequence[str] = ()) -> None:
        """Set the scalar at ``path`` to ``value``; a key not in the file is added to its mapping
        (after the first of the keys ``after`` it holds), or its mapping to the file's end."""
        what = ".".join(map(str, path))
        found, _ = self.get(path)

        def assign(parent: Any, key: Any) -> None:
            parent[key] = value

        if found:
            steps = self._steps(path)
            node = steps[-1].value
            if not isinstance(node, yaml.ScalarNode):
                raise NotEditable(f"{what}: is not a single value in the file")
            start, end = node.start_mark.index, node.end_mark.index
            old = self.text[start:end]
            if old[:1] in ("&", "*", "!"):
                raise NotEditable(f"{what}: holds a YAML anchor, alias or tag")
            text = self._replace(start, end, scalar_text(value, old))
            self._commit(text, self._expected(path, assign), what)
            return
        parent_found, parent = self.get(path[:-1])
        if parent_found and isinstance(parent, dict):
            text = self._insert_key(path, scalar_text(value), after)
            self._commit(text, self._expected(path, assign), what)
            return
        if len(path) == 2 and not parent_found:
            block = f"{path[0]}:{self.newline}{' ' * self._indent()}{path[1]}: {scalar_text(value)}"
            text = self.text + ("" if self.text.endswith("\n") else self.newline) + block + self.newline
            expected = copy.deepcopy(self.document)
            expected[path[0]] = {path[1]: value}
            self._commit(text, expected, what)
            return
        raise NotEditable(f"{what}: its mapping is not in the file")

    def _indent(self) -> int:
        """The file's indentation step: the column of its first nested block key (else 2)."""
        for _, value in yaml.compose(self.text, Loader=yaml.SafeLoader).value:
            if isinstance(value, yaml.MappingNode) and not value.flow_style and value.value:
                return int(value.value[0][0].start_mark.column) or 2
        return 2

    def _insert_key(self, path: Path_, value_text: str, after: Sequence[str]) -> str:
        steps = self._steps(path[:-1])
        mapping = steps[-1].value if steps else yaml.compose(self.text, Loader=yaml.SafeLoader)
        key = str(path[-1])
        if mapping.flow_style:
            brace = mapping.start_mark.index
            if self.text[brace : brace + 1] != "{":
                raise NotEditable(f"{'.'.join(map(str, path))}: its mapping holds an anchor or tag")
            empty = not mapping.value
            spaced = self.text[brace + 1 : brace + 2] == " "
            entry = (
                f" {key}: {value_text}{'' if empty else ','}"
                if spaced
                else f"{key}: {value_text}{'' if empty else ', '}"
            )
            return self.text[: brace + 1] + entry + self.text[brace + 1 :]
        # block: a new line after a one-line sibling (the lines after it belong to the next key)
        one_line = [
            (k, v)
            for k, v in mapping.value
            if isinstance(v, yaml.ScalarNode) and k.start_mark.line == v.end_mark.line
        ]
        by_name = {k.value: (k, v) for k, v in one_line}
        chosen = next(
            (by_name[name] for name in after if name in by_name), one_line[-1] if one_line else None
        )
        column = mapping.value[0][0].start_mark.column
        if chosen is not None:
            line = chosen[1].end_mark.line + 1
        elif steps and steps[-1].key is not None:  # right under the mapping's own key
            line = steps[-1].key.start_mark.line + 1
        else:
            raise NotEditable(f"{'.'.join(map(str, path))}: no place for a new key")
        return self._insert_lines(line, [" " * column + f"{key}: {value_text}"])

    def drop(self, path: Path_, value: Any) -> list[str]:
        """Remove the item equal to ``value`` from the list at ``path``; returns the comments that
        were on its lines (the caller keeps them in its own comment)."""
        what = ".".join(map(str, path))
        found, items = self.get(path)
        if not found or not isinstance(items, list):
            raise NotEditable(f"{what}: is not a list in the file")
        index = next((i for i, item in enumerate(items) if same_value(item, value)), None)
        if index is None:
            raise NotEditable(f"{what}: has no {value!r}")
        if len(items) == 1:
            raise NotEditable(f"{what}: {value!r} is its only value")
        node = self._steps(path)[-1].value
        nodes = node.value
        if node.flow_style:
            if index + 1 < len(nodes):
                start, end = nodes[index].start_mark.index, nodes[index + 1].start_mark.index
            else:
                start, end = nodes[index - 1].end_mark.index, nodes[index].end_mark.index
            removed = self.text[start:end]
            comments = [m.group(1).strip() for m in re.finditer(r"#(.*)", removed)]
            text = self._replace(start, end, "")
        else:
            item = nodes[index]
            lines = self.text.splitlines(keepends=True)
            first = item.start_mark.line
            if not re.fullmatch(r"\s*-\s*", lines[first][: item.start_mark.column]):
                raise NotEditable(f"{what}: item {index} does not start its own line")
            end = _content_end(item)  # a block collection's own end_mark lies past the comments after it
            while end > item.start_mark.index and self.text[end - 1] in " \t\r\n":
                end -= 1
            last = self.text.count("\n", 0, end)  # the line of the item's last character
            rest = self.text[end:].split("\n", 1)[0]  # after the item on that line: its comment
            comments = [c.strip() for c in re.findall(r"#(.*)", rest)]
            comments += [
                ln.strip()[1:].strip() for ln in lines[first + 1 : last] if ln.strip().startswith("#")
            ]
            text = "".join(lines[:first] + lines[last + 1 :])

        def remove(parent: Any, key: Any) -> None:
            parent[key] = [item for i, item in enumerate(parent[key]) if i != index]

        self._commit(text, self._expected(path, remove), what)
        return comments

    def comment(self, path: Path_, lines: Sequence[str]) -> None:
        """Comment ``lines`` (without ``#``) on their own lines right above ``anchor(path)``'s line."""
        anchor = self.anchor(path)
        steps = self._steps(anchor)
        node = (steps[-1].key or steps[-1].value) if steps else None
        line = node.start_mark.line if node is not None else 0
        current = self.text.splitlines(keepends=True)
        here = current[line] if line < len(current) else ""
        indent = " " * (len(here) - len(here.lstrip(" ")))
        text = self._insert_lines(line, [f"{indent}# {text}".rstrip() for text in lines])
        self._commit(text, self.document, ".".join(map(str, path)))

    def _replace(self, start: int, end: int, new: str) -> str:
        """The text with ``[start, end)`` replaced by ``new``. An end-of-line comment aligned with
        the one on the line above or below keeps its column; any other keeps its spacing."""
        line_start = self.text.rfind("\n", 0, start) + 1
        line_end = self.text.find("\n", end)
        line_end = len(self.text) if line_end < 0 else line_end
        rest = self.text[end:line_end]
        comment = re.fullmatch(r"([^#'\"]*?)(\s+)(#.*)", rest, flags=re.DOTALL)
        if comment and "\n" not in self.text[start:end]:
            column = end - line_start + len(comment.group(1)) + len(comment.group(2))
            lines = self.text.splitlines()
            here = self.text.count("\n", 0, start)
            neighbours = [lines[i] for i in (here - 1, here + 1) if 0 <= i < len(lines)]
            if any(line[column - 1 : column + 1] == " #" for line in neighbours):
                spaces = max(1, len(comment.group(2)) + (end - start) - len(new))
                rest = comment.group(1) + " " * spaces + comment.group(3)
        return self.text[:start] + new + rest + self.text[line_end:]

    def _insert_lines(self, line: int, new: Sequence[str]) -> str:
        lines = self.text.splitlines(keepends=True)
        if line > 0 and line <= len(lines) and not lines[line - 1].endswith("\n"):
            lines[line - 1] += self.newline
        block = [text + self.newline for text in new]
        return "".join(lines[:line] + block + lines[line:])


def _content_end(node: yaml.Node) -> int:
    """Where a node's own text ends: its last scalar's end for a block collection (PyYAML ends a
    block collection at the next token, past any comment lines that follow it)."""
    if isinstance(node, yaml.ScalarNode) or getattr(node, "flow_style", False) or not node.value:
        return int(node.end_mark.index)
    last = node.value[-1]
    return _content_end(last[1] if isinstance(node, yaml.MappingNode) else last)
