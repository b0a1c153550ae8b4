#!/usr/bin/env python3
"""The planted tree: a copy of this repository with the simulator's planted bugs in its code.

The crates that ship hold no planted bug and read no variable of the project's. The bugs are
`tools/sim/planted.patch`: it adds lambda-kit's per-thread switch (`lambda_kit::mutation`, compiled
in by its build script under PROCESS_ORDERS_SIM_MUTATIONS=1) and every check site to a copy of the
repository, where the simulator's planted-bug tests and `make sim MUTATION=...` run. No copy is
ever published or deployed.

Prints the copy's path. The copy is kept between runs and a file is written only when its
content changed, so cargo rebuilds only what changed. A patch that no longer applies (the code
around a check site moved) stops here with git apply's message and the rejected hunks, the copy
holding every hunk that applied: put the rest in the copy
by hand, then `scripts/planted_tree.py --write-patch` writes the patch again as the difference
between this tree and the copy.
"""

import difflib
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATCH = os.path.join(ROOT, "tools", "sim", "planted.patch")


def tracked_files():
    """The repository's files as git sees them (tracked and untracked, ignored ones left out)."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout
    names = sorted({n for n in out.decode().split("\0") if n})
    return [n for n in names if os.path.isfile(os.path.join(ROOT, n))]


def write_patch(dest):
    """The patch again: every file of the copy that differs from this tree's."""
    copied = []
    for folder, dirs, names in os.walk(dest):
        if folder == dest and "target" in dirs:
            dirs.remove("target")
        copied.extend(os.path.relpath(os.path.join(folder, n), dest) for n in names)
    hunks = []
    for relative in sorted(copied):
        mine = os.path.join(ROOT, relative)
        with open(os.path.join(dest, relative), "rb") as f:
            planted = f.read()
        original = b""
        if os.path.isfile(mine):
            with open(mine, "rb") as f:
                original = f.read()
        if planted == original:
            continue
        planted = planted.decode("utf-8").splitlines(keepends=True)
        original = original.decode("utf-8").splitlines(keepends=True)
        hunks.extend(difflib.unified_diff(original, planted, f"a/{relative}", f"b/{relative}"))
    if not hunks:
        sys.exit("planted tree: the copy plants nothing; the patch is left as it was")
    with open(PATCH, "w", encoding="utf-8") as f:
        f.writelines(hunks)
    print(PATCH)


def main():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    dest = os.environ.get("PLANTED_TREE") or os.path.join(target, "planted-tree")
    if sys.argv[1:] == ["--write-patch"]:
        write_patch(dest)
        return
    files = tracked_files()
    with tempfile.TemporaryDirectory() as stage:
        for name in files:
            os.makedirs(os.path.dirname(os.path.join(stage, name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(stage, name))
        # git's own apply (the clone has git; GNU patch is not on every fresh machine), outside
        # any repository: every hunk that applies is applied, the rest left in .rej files.
        applied = subprocess.run(
            ["git", "apply", "--reject", "--whitespace=nowarn", PATCH],
            cwd=stage, capture_output=True,
            env={**os.environ, "GIT_CEILING_DIRECTORIES": os.path.dirname(stage)},
        )
        rejected = []
        wanted = set()
        for folder, _, names in os.walk(stage):
            for name in names:
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, stage)
                if relative.endswith((".rej", ".orig")):
                    if relative.endswith(".rej"):
                        with open(path, encoding="utf-8") as f:
                            rejected.append(f"{relative}:\n{f.read()}")
                    continue
                wanted.add(relative)
                out = os.path.join(dest, relative)
                if os.path.isfile(out):
                    with open(path, "rb") as a, open(out, "rb") as b:
                        if a.read() == b.read():
                            continue
                os.makedirs(os.path.dirname(out), exist_ok=True)
                shutil.copyfile(path, out)
                shutil.copymode(path, out)
    # Files gone from the repository go from the copy too (its own build output stays).
    for folder, dirs, names in os.walk(dest):
        if folder == dest and "target" in dirs:
            dirs.remove("target")
        for name in names:
            path = os.path.join(folder, name)
            if os.path.relpath(path, dest) not in wanted:
                os.remove(path)
    if applied.returncode != 0:
        # The copy holds every hunk that applied: put the rest in by hand, then --write-patch.
        sys.stderr.write(applied.stdout.decode() + applied.stderr.decode())
        sys.stderr.write("".join(rejected))
        sys.exit(f"planted tree: tools/sim/planted.patch no longer applies whole; {dest} has "
                 "what applied: plant the hunks above there, then run this with --write-patch")
    print(dest)


if __name__ == "__main__":
    main()
