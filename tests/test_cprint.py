"""codegen/cprint.py: the C syntax every printer shares, line for line."""
from loopopt.codegen import cprint


def test_loops_blocks_and_nests():
    assert cprint.for_loop("int", "i", 7) == "for (int i = 0; i < 7; ++i)"
    assert cprint.for_loop("long", "k", "n", "k0", step=16) == "for (long k = k0; k < n; k += 16)"
    assert cprint.block("if (x)", ["y = 1;"], depth=1, note="   /* c */") == [
        "    if (x) {   /* c */", "        y = 1;", "    }"]
    assert cprint.block("#pragma omp parallel for\nfor (;;)", ["s;"]) == [
        "#pragma omp parallel for", "for (;;) {", "    s;", "}"]
    assert cprint.block("", []) == ["{", "}"]
    assert cprint.nest(["a", "b"], ["s;"]) == ["a {", "    b {", "        s;", "    }", "}"]
    assert cprint.nest([], ["s;"], depth=2) == ["        s;"]
    assert cprint.loop_nest(["a", "b"], ["s;"]) == ["a", "    b {", "        s;", "    }"]
    assert cprint.staircase(["a", "b"], depth=1) == ["    a", "        b"]
    assert cprint.text(["x;", "y;"], 1) == "    x;\n    y;"
