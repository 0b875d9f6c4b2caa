"""What tools/mimo-prep reads, bounded (docs/data.md): only regular files
(a FIFO or a device named as an input would block or never end), of at
most a given size, JSON nested no deeper than Python's parser recurses;
and the Python packages it needs, each missing one named with its Debian
and pip names. Only the standard library here: it is imported before the
packages are checked."""
import importlib
import json
import os
import stat

# module: (Debian package, pip package)
PACKAGES = {
    "numpy": ("python3-numpy", "numpy"),
    "PIL": ("python3-pil", "Pillow"),
    "sentencepiece": ("python3-sentencepiece", "sentencepiece"),
    "regex": ("python3-regex", "regex"),
    "jinja2": ("python3-jinja2", "Jinja2"),
}


class InputError(Exception):
    """An input that cannot be read: the message names the file."""


def missing_package(module, error=None):
    """One line: the missing module, its Debian and its pip package."""
    deb, pip = PACKAGES[module]
    why = f" ({str(error).splitlines()[0]})" if str(error or "").strip() else ""
    return (f"the Python package {module} is missing{why}: install Debian's {deb} "
            f"(apt-get install {deb}) or pip's {pip} (pip install {pip})")


def need(module):
    """The module, imported; InputError naming its packages if missing."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise InputError(missing_package(module, e))


def regular_file(path, limit, what="it"):
    """Checks that `path` is a regular file of at most `limit` bytes (without
    opening it: a FIFO would block the open); returns its size."""
    try:
        st = os.stat(path)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read {what}: {e}")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: {what} is not a regular file "
                         f"({file_kind(st.st_mode)})")
    if st.st_size > limit:
        raise InputError(f"{path}: {what} is {st.st_size} bytes, more than the "
                         f"{limit} mimo-prep reads")
    return st.st_size


def file_kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


def loads(text):
    """json.loads, but a document nested too deeply for the parser is a
    ValueError ("nested too deeply") rather than a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply (more levels of [ and { than "
                         "Python's JSON parser takes)")


def read_json(path, limit, what="it"):
    """The JSON document in a regular file of at most `limit` bytes."""
    regular_file(path, limit, what)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(limit + 1)
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read {what}: {e}")
    if len(text) > limit:  # grew since the stat
        raise InputError(f"{path}: {what} is more than the {limit} bytes mimo-prep reads")
    try:
        return loads(text)
    except ValueError as e:
        raise InputError(f"{path}: not JSON: {e}")


def pointer(*keys):
    """The JSON pointer (RFC 6901) of a value: pointer("model", "vocab", "a/b")
    is /model/vocab/a~1b."""
    return "".join("/" + str(k).replace("~", "~0").replace("/", "~1") for k in keys)


def kind(value):
    """What a JSON value is, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return "a string" if len(value) > 40 else f"the string {value!r}"
    return "an array" if isinstance(value, list) else "an object"


def is_int(value):
    """A JSON integer: not true/false (Python's bools are ints), not 2.0."""
    return isinstance(value, int) and not isinstance(value, bool)
