"""Tests of wasm_names.py on a small hand-assembled module: renames land in the import and export sections, every
other byte is kept, and a collision or a non-wasm file stops the build. Run by scripts/test.sh."""
import unittest

import wasm_names


def name(text):
    raw = text.encode()
    return bytes([len(raw)]) + raw


def section(ident, body):
    return bytes([ident, len(body)]) + body


def module(import_field, export_name, other_export="memory"):
    types = section(1, b"\x01\x60\x00\x00")  # one type: () -> ()
    imports = section(2, b"\x01" + name("wbg") + name(import_field) + b"\x00\x00")  # func of type 0
    functions = section(3, b"\x01\x00")
    memory = section(5, b"\x01\x00\x01")  # one memory, min 1 page
    exports = section(7, b"\x02" + name(export_name) + b"\x00\x01" + name(other_export) + b"\x02\x00")
    code = section(10, b"\x01\x02\x00\x0b")
    return b"\0asm\x01\0\0\0" + types + imports + functions + memory + exports + code


def names_of(wasm):
    """(import fields, export names) read back with the module's own reader."""
    imports, exports, i = [], [], 8
    while i < len(wasm):
        ident = wasm[i]
        size, start = wasm_names._leb(wasm, i + 1)
        body, i = wasm[start:start + size], start + size
        if ident == 2:
            _, j = wasm_names._leb(body, 0)
            _, j = wasm_names._name(body, j)
            imports.append(wasm_names._name(body, j)[0])
        elif ident == 7:
            count, j = wasm_names._leb(body, 0)
            for _ in range(count):
                text, j = wasm_names._name(body, j)
                exports.append(text)
                j = wasm_names._leb(body, j + 1)[1]
    return imports, exports


class WasmNames(unittest.TestCase):
    def test_renames_imports_and_exports_and_keeps_the_rest(self):
        before = module("__wbg_set_font_aa0c0c514c73a5fa", "wasm_bindgen_0123___invoke")
        after = wasm_names.rename(before, {"__wbg_set_font_aa0c0c514c73a5fa": "a", "wasm_bindgen_0123___invoke": "b",
                                           "__wbg_ptr": "c"})
        self.assertEqual(names_of(after), (["a"], ["b", "memory"]))
        # Renaming back gives the very same bytes: nothing else moved.
        self.assertEqual(wasm_names.rename(after, {"a": "__wbg_set_font_aa0c0c514c73a5fa",
                                                   "b": "wasm_bindgen_0123___invoke"}), before)

    def test_a_name_that_would_collide_stops_the_build(self):
        with self.assertRaises(SystemExit):
            wasm_names.rename(module("__wbg_x", "wasm_bindgen_y"), {"wasm_bindgen_y": "memory"})

    def test_not_wasm_stops_the_build(self):
        with self.assertRaises(SystemExit):
            wasm_names.rename(b"<!doctype html>", {})

    def test_the_name_cache_is_read_as_terser_writes_it(self):
        cache = {"vars": {"props": {}}, "props": {"props": {"$__wbg_ptr": "t", "$wasm_bindgen_z": "_"}}}
        self.assertEqual(wasm_names.from_name_cache(cache), {"__wbg_ptr": "t", "wasm_bindgen_z": "_"})


if __name__ == "__main__":
    unittest.main()
