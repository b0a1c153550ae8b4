#!/usr/bin/env python3
"""Counts a library's root names, the measure issue 50 sets (at most 20 a crate), so anyone can
rerun it.

Usage:
    scripts/root_names.py crates/*/src/lib.rs

The rule: every `pub` item declared at the top of the crate's lib.rs (a module, function,
struct, enum, trait, constant, type or static), plus each name a top-level `pub use` brings in
(`pub use a::{B, c};` is two; `pub use lambda_kit;` is one). Items behind a feature count as if
the feature were on. Prints each crate's count and its names.
"""

import re
import sys

ITEM = re.compile(r"^pub (?:async )?(?:mod|fn|struct|enum|trait|const|type|static) (\w+)", re.M)
USE = re.compile(r"^pub use ([^;]+);", re.M | re.S)


def root_names(text):
    names = [m.group(1) for m in ITEM.finditer(text)]
    for m in USE.finditer(text):
        body = m.group(1)
        if "{" in body:
            inner = body[body.index("{") + 1 : body.rindex("}")]
            # A nested group (`a::{b, c}` inside the braces) is left out: none is used here.
            parts = re.split(r",", re.sub(r"\{[^}]*\}", "", inner))
        else:
            parts = [body]
        for part in (p.strip() for p in parts):
            if part:
                names.append(part.split(" as ")[-1].split("::")[-1].strip())
    return names


def main(paths):
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in paths:
        with open(path, encoding="utf-8") as f:
            names = root_names(f.read())
        print(f"{path}: {len(names)}: {' '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
