#!/usr/bin/env python3
"""Checks docs/ARCHITECTURE.md against the tree: every `code` span that names a path, a type, a
Type::member, a function or a tool must exist. Exit 0 when all do, 1 with the list otherwise."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
SOURCES = [p for d in ("server", "engine", "model", "kernels", "tools", "bench")
           for p in (ROOT / d).rglob("*") if p.suffix in (".h", ".cpp", ".cu", ".cuh")]
TEXT = {p: p.read_text(errors="replace") for p in SOURCES}
ALL = "\n".join(TEXT.values())
CMAKE = (ROOT / "CMakeLists.txt").read_text()


def defines_type(name):
    pat = re.compile(r"\b(class|struct|using|enum class|enum)\s+" + re.escape(name) + r"\b")
    return [p for p, t in TEXT.items() if pat.search(t)]


def check(span):
    """None when span names something that exists (or names no code), else the reason."""
    if span.startswith("../"):
        return None  # outside the repository (../shared sits beside the checkout, not in CI's clone)
    if re.fullmatch(r"[A-Z][A-Z0-9_]+", span):
        return None if re.search(r"#\s*define\s+" + span + r"\b", ALL) else "no such macro"
    if "/" in span and " " not in span and not span.startswith(("data:", "file:", "http")):
        return None if (ROOT / span.rstrip("/")).exists() else "no such path"
    if re.fullmatch(r"vlm-[a-z-]+", span):
        return None if (ROOT / "tools" / span).is_dir() else "no such tool"
    m = re.fullmatch(r"([A-Z]\w*)::(\w+)", span)
    if m:
        cls, member = m.groups()
        if f"{cls}::{member}" in ALL:
            return None
        for p in defines_type(cls):
            if re.search(r"\b" + re.escape(member) + r"\b", TEXT[p]):
                return None
        return "no such member"
    if re.fullmatch(r"[A-Z]\w*", span):
        return None if defines_type(span) else "no such type"
    if re.fullmatch(r"[a-z_][a-z0-9_]*", span) and "_" in span:
        found = re.search(r"\b" + re.escape(span) + r"\b", ALL)
        return None if found or re.search(r"\btest_\$\{folder\}", CMAKE) and span.startswith("test_") and \
            (ROOT / "tests" / span[len("test_"):]).is_dir() else "not in the sources"
    return None  # prose in code style (flags, JSON fields, event names)


def main():
    spans = re.findall(r"`([^`\n]+)`", DOC.read_text())
    bad = [(s, why) for s in dict.fromkeys(spans) for why in [check(s)] if why]
    for s, why in bad:
        print(f"docs/ARCHITECTURE.md: `{s}`: {why}")
    print(f"checked {len(set(spans))} names, {len(bad)} missing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
