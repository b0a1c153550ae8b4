#!/usr/bin/env python3
"""Counts a "one screen" the way docs/library.md states it, for our Rust and for Powertools'
Python, so anyone can rerun the comparison.

Usage:
    scripts/count_screen.py rust FILE... [--lib DIR ...]
    scripts/count_screen.py python FILE... [--lib DIR]

The rule, the same for both languages:

- lines: every line that is not blank and not only a comment (`#` in Python, `//` and `//!` in
  Rust), attributes and decorators included; printed with and without the import statements
  (Python `import` / `from ... import`, Rust `use`, each with its continuation lines).
- names: the distinct items the code takes from the libraries: types, functions, methods,
  constants, enum members, attributes; modules are not names, and neither are keyword argument
  names. An item counts when the code imports it from a library, writes it after a library path
  (`sqs_batch::json`, `lambda::run`, `EventType.SQS`), or calls or reads it as a method or
  attribute (`.into_verdict()`, `config.register_lambda_context(...)`, `record.body`) and the
  library's source defines that name (`--lib`: the crates' `src` folders, whose `pub` items are
  read; or the installed `aws_lambda_powertools` package, whose `def`, `class` and class-level
  names are read). Names the screen defines itself never count.

Rust libraries: `sqs_batch`, `idempotency`, `lambda_kit`. Python: `aws_lambda_powertools`.
"""

import argparse
import pathlib
import re

RUST_LIBS = ("sqs_batch", "idempotency", "lambda_kit")
PY_LIB = "aws_lambda_powertools"


def strip_strings(line: str) -> str:
    return re.sub(r'"(?:\\.|[^"\\])*"', '""', line)


def rust_lines(text: str):
    lines, in_use = [], False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("//"):
            continue
        starts = re.match(r"(pub\s+)?use\s", line) is not None
        is_import = starts or in_use
        if starts or in_use:
            in_use = not line.endswith(";")
        lines.append((line, is_import))
    return lines


def python_lines(text: str):
    lines, open_parens = [], 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        starts = re.match(r"(import|from)\s", line) is not None
        is_import = starts or open_parens > 0
        if is_import:
            open_parens += line.count("(") - line.count(")")
        lines.append((line, is_import))
    return lines


def rust_library_names(dirs):
    names = set()
    pattern = re.compile(
        r"\bpub(?:\([^)]*\))?\s+(?:async\s+)?(?:unsafe\s+)?(?:const\s+)?"
        r"(?:fn|struct|enum|trait|type|const|static)\s+([A-Za-z_]\w*)"
    )
    for d in dirs:
        for path in pathlib.Path(d).rglob("*.rs"):
            text = path.read_text(errors="replace")
            names.update(pattern.findall(text))
    return names


def python_library_names(dirs):
    names = set()
    for d in dirs:
        for path in pathlib.Path(d).rglob("*.py"):
            text = path.read_text(errors="replace")
            names.update(re.findall(r"^\s*(?:async\s+)?def\s+([A-Za-z_]\w*)", text, re.M))
            names.update(re.findall(r"^\s*class\s+([A-Za-z_]\w*)", text, re.M))
            names.update(re.findall(r"^ {4}([A-Za-z_]\w*)\s*(?::[^=]*)?=", text, re.M))
    return names


def rust_names(lines, library):
    code = " ".join(strip_strings(line) for line, _ in lines)
    own = set(re.findall(r"\b(?:fn|struct|enum|trait|type|let|const|static)\s+([A-Za-z_]\w*)", code))
    own |= set(re.findall(r"\|\s*([a-z_]\w*)\s*:", code))
    names, modules = set(), set(RUST_LIBS)
    for line, is_import in lines:
        if not is_import:
            continue
        for lib in RUST_LIBS:
            m = re.search(rf"\b{lib}::(.*?);?$", line)
            if not m:
                continue
            items = re.sub(r"[{}]", " ", m.group(1)).replace(",", " ").split()
            for item in items:
                last = item.split("::")[-1]
                # A lower-case import that the library defines as a module is a module.
                if last[:1].islower() and last not in library:
                    modules.add(last)
                else:
                    names.add(last)
    for path in re.findall(r"\b([A-Za-z_]\w*(?:::[A-Za-z_]\w*)+)", code):
        parts = path.split("::")
        if parts[0] in modules or parts[0] in names:
            names.update(p for p in parts[1:] if p not in modules)
    for method in re.findall(r"\.([a-z_]\w*)\s*\(", code):
        if method in library and method not in own:
            names.add(method)
    return sorted(names - own)


def python_names(lines, library):
    code = " ".join(strip_strings(line) for line, is_import in lines if not is_import)
    own = set(re.findall(r"\b(?:def|class)\s+([A-Za-z_]\w*)", code))
    own |= set(re.findall(r"\b([A-Za-z_]\w*)\s*=(?!=)", code))
    names = set()
    imports = " ".join(line for line, is_import in lines if is_import)
    for m in re.finditer(rf"from\s+({PY_LIB}[\w.]*)\s+import\s+\(?([^()]*?)\)?(?=\s+from\s|\s+import\s|$)", imports):
        for item in m.group(2).replace(",", " ").split():
            names.add(item)
    for attr in re.findall(r"\b[A-Za-z_]\w*\.([A-Za-z_]\w*)", code):
        if attr in library or attr.isupper():
            names.add(attr)
    return sorted(names - (own - names))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("language", choices=["rust", "python"])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--lib", action="append", default=[])
    args = parser.parse_args()
    text = "\n".join(pathlib.Path(f).read_text() for f in args.files)
    if args.language == "rust":
        lines = rust_lines(text)
        library = rust_library_names(args.lib)
        names = rust_names(lines, library)
    else:
        lines = python_lines(text)
        library = python_library_names(args.lib)
        names = python_names(lines, library)
    without = [line for line, is_import in lines if not is_import]
    print(f"lines: {len(lines)} ({len(without)} without imports)")
    print(f"names: {len(names)}: {', '.join(names)}")


if __name__ == "__main__":
    main()
