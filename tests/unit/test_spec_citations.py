"""Spec citations name a file in docs/spec/ and a section heading in it, in one form a reader can follow.

The one form is `docs/spec/<FILE>.md §<section>` (several: `§2.2-§2.3, §2.5 and §4`; an appendix:
`Appendix A`). The old forms ("spec 1.2", "GYMS.md 0.6", "spec ALGORITHMS.md section 4") pointed outside
the repository or left the file to guess; they are refused everywhere.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "docs" / "spec"
SCANNED_DIRS = ("userrl", "envs", "algorithms", "serving", "tests", "bench", "experiments")
SCANNED_FILES = ("README.md", "docs/ARCHITECTURE.md")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".txt", ".toml", ".html", ".js", ".css"}
#: This file quotes the old forms on purpose (the checker's own tests below).
SELF = Path(__file__).resolve()


_SECTION = r"(?:§\d+(?:\.\d+)*|Appendix [A-Z]\b)"
#: `docs/spec/FILE.md`, then its sections, if any, joined by ", ", "-" or " and " on the same line.
CITATION = re.compile(rf"docs/spec/(\w+)\.md((?:(?:,[ \t]*|[ \t]*[-–][ \t]*|[ \t]+and[ \t]+|[ \t]+){_SECTION})*)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)|(Appendix [A-Z])")
OLD_FORM = re.compile(
    r"(?<!docs/spec/)\b(?:GYMS|ALGORITHMS|TAU_TOOLS)\.md"  # a spec file named without its place
    r"|docs/spec/\w+\.md`?[ \t]+(?:sections?[ \t]+)?\d"  # a section number without its §
    r"|\bspec`?[ \t]+(?:sections?[ \t]+|§[ \t]*)?(?:\d|Appendix\b)"  # "spec 1.2": which spec?
)
HEADING = re.compile(r"^#{1,6}[ \t]+(?:(\d+(?:\.\d+)*)\.?|(Appendix [A-Z])\.)[ \t]", re.MULTILINE)


def spec_sections(text: str) -> set[str]:
    """The section ids of a spec file's headings: '0.6', '4', 'Appendix A'."""
    return {number or appendix for number, appendix in HEADING.findall(text)}


def citation_errors(text: str, specs: dict[str, set[str]]) -> list[str]:
    """What is wrong with each new-form citation in `text`: an unknown file or a section it lacks."""
    errors = []
    for match in CITATION.finditer(text):
        name, sections = match.group(1), match.group(2)
        if name not in specs:
            errors.append(f"{match.group(0)!r}: no docs/spec/{name}.md")
            continue
        for number, appendix in SECTION.findall(sections):
            if (number or appendix) not in specs[name]:
                errors.append(f"{match.group(0)!r}: docs/spec/{name}.md has no section {number or appendix}")
    return errors


def scanned_files() -> list[Path]:
    """Every text file of the scanned folders and top-level docs."""
    paths = [ROOT / name for name in SCANNED_FILES]
    for folder in SCANNED_DIRS:
        paths += [p for p in (ROOT / folder).rglob("*") if p.suffix in TEXT_SUFFIXES and p.is_file()
                  and "__pycache__" not in p.parts]
    return sorted(p for p in paths if p.resolve() != SELF)


@pytest.fixture(scope="module")
def specs() -> dict[str, set[str]]:
    """Each spec file's name (without .md) -> its section ids."""
    return {path.stem: spec_sections(path.read_text(encoding="utf-8")) for path in SPEC_DIR.glob("*.md")}


def test_spec_files_are_in_the_repository(specs):
    assert set(specs) == {"GYMS", "ALGORITHMS", "TAU_TOOLS"}
    assert {"0.6", "0.10", "5", "7"} <= specs["GYMS"]
    assert {"1.2", "4.7", "5.2", "Appendix A", "Appendix B"} <= specs["ALGORITHMS"]
    assert {"0", "6"} <= specs["TAU_TOOLS"]


def test_every_citation_names_an_existing_file_and_section(specs):
    errors, count = [], 0
    for path in scanned_files():
        text = path.read_text(encoding="utf-8")
        count += len(CITATION.findall(text))
        errors += [f"{path.relative_to(ROOT)}: {e}" for e in citation_errors(text, specs)]
    assert not errors, "\n".join(errors)
    assert count > 100  # the scan found the citations: a broken pattern would pass on nothing


def test_no_old_form_citation():
    found = []
    for path in scanned_files():
        relative = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OLD_FORM.search(line):
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "cite as docs/spec/<FILE>.md §<section>:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "(GYMS.md 0.6)", "(spec 1.2)", "spec section 4", "spec `ALGORITHMS.md` 3.8", "(spec Appendix B)",
    "docs/spec/GYMS.md 0.6", "docs/spec/GYMS.md section 5",
])
def test_old_forms_are_recognised(line):
    assert OLD_FORM.search(line)


@pytest.mark.parametrize("line", [
    "docs/spec/GYMS.md §0.6", "docs/spec/ALGORITHMS.md §3, Appendix A", "spec.name", "a spec limit",
    "module_from_spec(spec)", "GYMS[name]",
])
def test_new_form_and_plain_words_are_not_old(line):
    assert not OLD_FORM.search(line)


def test_a_missing_section_or_file_is_reported():
    specs = {"GYMS": {"0", "0.6", "4"}, "ALGORITHMS": {"2.2", "2.3", "Appendix A"}}
    assert citation_errors("(docs/spec/GYMS.md §0.6, §4; docs/spec/ALGORITHMS.md §2.2-§2.3 and Appendix A)",
                           specs) == []
    errors = citation_errors("docs/spec/GYMS.md §0.6 and §9; docs/spec/ALGORITHMS.md Appendix C; "
                             "docs/spec/NOPE.md §1", specs)
    assert len(errors) == 3 and "no section 9" in errors[0] and "no section Appendix C" in errors[1]
    assert "no docs/spec/NOPE.md" in errors[2]
