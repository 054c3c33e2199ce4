"""docs/architecture.md's "## Modules" map names every module of the tidings package, and
only those: one line each, `- `tidings/<package>/<module>.py`: what it is for`, under a
`### tidings/<package>/` heading of its own package. `__init__.py` files and the generated
`*_pb2.py` are left out. A module added, moved or removed without the map fails here, naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tidings"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTION = "## Modules"
GROUP = re.compile(r"^### `?(tidings(?:/\w+)*)/`?$")
ENTRY = re.compile(r"^- `(tidings(?:/\w+)*/\w+\.py)`: \S")


@dataclass
class ModuleMap:
    """What the section lists, and the lines in it that are not entries of the map's form."""

    modules: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)


def package_modules(package: Path = PACKAGE) -> set[str]:
    """Every module of the package as its path from the repository's root (slashes)."""
    return {
        p.relative_to(package.parent).as_posix()
        for p in package.rglob("*.py")
        if p.name != "__init__.py" and not p.name.endswith("_pb2.py")
    }


def section_lines(text: str) -> list[str]:
    """The lines of the "## Modules" section (up to the next `## ` heading); [] if none."""
    lines = text.splitlines()
    if SECTION not in lines:
        return []
    start = lines.index(SECTION) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def read_map(text: str) -> ModuleMap:
    """The entries of the section, each checked to sit under its own package's heading."""
    found = ModuleMap()
    group: str | None = None
    for line in section_lines(text):
        if heading := GROUP.match(line):
            group = heading.group(1)
        elif line.startswith("#"):
            found.faults.append(f"not a package heading: {line!r}")
        elif line.startswith("- "):
            entry = ENTRY.match(line)
            if entry is None:
                found.faults.append(f"not `- `tidings/.../name.py`: what it is for`: {line!r}")
                continue
            module = entry.group(1)
            if module.rpartition("/")[0] != group:
                found.faults.append(f"{module} is under the heading of {group}")
            found.modules.append(module)
        elif line[:1].isspace() and line.strip():
            found.faults.append(f"an entry goes on over one line: {line!r}")
    return found


def differences(text: str, modules: set[str]) -> list[str]:
    """Everything wrong with the map in `text` for these modules, one sentence each."""
    found = read_map(text)
    if not found.modules and not found.faults:
        return [f"docs/architecture.md has no {SECTION!r} section listing the modules"]
    listed = set(found.modules)
    problems = list(found.faults)
    problems += [f"{m} is listed twice" for m in sorted(listed) if found.modules.count(m) > 1]
    problems += [f"{m} is missing from the map" for m in sorted(modules - listed)]
    problems += [f"{m} is listed but does not exist" for m in sorted(listed - modules)]
    return problems


def test_the_map_lists_every_module_and_only_those() -> None:
    problems = differences(ARCHITECTURE.read_text(encoding="utf-8"), package_modules())
    assert not problems, "docs/architecture.md, " + SECTION + ":\n" + "\n".join(problems)


def test_the_check_names_what_is_missing_stale_or_misplaced() -> None:
    text = "\n".join([
        "# Architecture", "", SECTION, "",
        "### tidings/", "- `tidings/cli.py`: the command",
        "- `tidings/gone.py`: removed since",
        "### tidings/server/", "- `tidings/server/server.py`: the core server",
        "- `tidings/client/client.py`: the client",
        "  that goes on",
        "- server.py: no path",
        "", "## The path of one message", "- `tidings/pipe.py`: not in the section",
    ])
    modules = {"tidings/cli.py", "tidings/server/server.py", "tidings/client/client.py",
               "tidings/pipe.py"}
    assert differences(text, modules) == [
        "tidings/client/client.py is under the heading of tidings/server",
        "an entry goes on over one line: '  that goes on'",
        "not `- `tidings/.../name.py`: what it is for`: '- server.py: no path'",
        "tidings/pipe.py is missing from the map",
        "tidings/gone.py is listed but does not exist",
    ]
    assert differences("# Architecture\n", modules) == [
        "docs/architecture.md has no '## Modules' section listing the modules"]


def test_the_package_walk_leaves_out_inits_and_generated_code() -> None:
    modules = package_modules()
    assert "tidings/server/msgtrace.py" in modules
    assert "tidings/streaming/stores/common.py" in modules
    assert not [m for m in modules if m.endswith(("/__init__.py", "_pb2.py"))]


def test_no_merge_conflict_markers_in_the_docs_or_the_code() -> None:
    """A merge left unresolved (`<<<<<<<`, `=======`, `>>>>>>>` lines) fails here: one got
    into architecture.md once, and no other test read that part of the file."""
    root = Path(__file__).resolve().parents[2]
    marked = []
    for path in [*root.glob("*.md"), *(root / "docs").glob("*.md"),
                 *(root / "tidings").rglob("*.py"), *(root / "tests").rglob("*.py")]:
        if "node_modules" in path.parts:
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if line.startswith(("<<<<<<< ", ">>>>>>> ")) or line == "=======":
                marked.append(f"{path.relative_to(root)}:{n}")
    assert not marked, marked
