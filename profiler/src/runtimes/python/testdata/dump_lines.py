# Dumps, for every code object of the modules named on the command line, its line table and
# the line the interpreter itself gives every instruction offset (PyCode_Addr2Line, the
# function tracebacks use), plus co_positions() (3.11+) or co_lines() (3.10) as a second
# opinion. One JSON object per line. Runs on Python 3.6 to 3.13.
import ctypes
import importlib
import json
import sys

addr2line = ctypes.pythonapi.PyCode_Addr2Line
addr2line.argtypes = [ctypes.py_object, ctypes.c_int]
addr2line.restype = ctypes.c_int


def codes(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            yield from codes(const)


def second_opinion(code, n):
    if sys.version_info >= (3, 11):
        return [p[0] for p in code.co_positions()]
    if sys.version_info >= (3, 10):
        lines = [None] * n
        for start, end, line in code.co_lines():
            for unit in range(start // 2, min(end // 2, n)):
                lines[unit] = line
        return lines
    return None


for name in sys.argv[1:]:
    module = importlib.import_module(name)
    with open(module.__file__, "rb") as f:
        source = f.read()
    top = compile(source, module.__file__, "exec")
    for code in codes(top):
        table = code.co_linetable if sys.version_info >= (3, 10) else code.co_lnotab
        n = len(code.co_code) // 2
        lines = []
        for unit in range(n):
            line = addr2line(code, unit * 2)
            lines.append(None if line < 0 else line)
        print(json.dumps({
            "module": name,
            "name": code.co_name,
            "first": code.co_firstlineno,
            "table": table.hex(),
            "lines": lines,
            "api": second_opinion(code, n),
        }))
