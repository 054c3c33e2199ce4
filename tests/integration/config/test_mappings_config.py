"""Subject mappings in the configuration file (`mappings { }` at the top, an account's
`mappings`/`maps`), checked by `tidings server -t -c FILE` and by the reference's
`nats-server -t -c FILE` on the same files: a good file is taken by both, a bad one refused
by both with the same message at the same `file:line:col` (each bad file holds one error:
the reference reads a map's keys in Go's random order and reports them all, tidings the
first in the file). An empty destination, which the reference takes and then fails on (its
server stops at the first message mapped to it), tidings refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_config_file import reference, tidings

pytestmark = pytest.mark.timeout(120)

GOOD = {
    "plain": 'mappings { foo: bar, "a.*.b": "b.$1.a", "c.>": "d.>", "e.*": "e.{{wildcard(1)}}" }',
    "maps": "maps { foo: bar }",
    "functions": 'mappings { "f.*.*": "f.{{partition(10,1,2)}}.{{splitfromleft(1,2)}}.'
                 '{{SplitFromRight(2,1)}}.{{slicefromleft(1,2)}}.{{sliceFromRight(2,3)}}.'
                 '{{split(1,-)}}.{{left(2,1)}}.{{right(1,1)}}.{{random(5)}}", '
                 '"g": "g.{{partition(3)}}", "h.*": "{{ Partition(4) }}.$0" }',
    "weighted": 'mappings { w: [{destination: x, weight: 40%}, {dest: "y", weight: "60"}], '
                'v: [{destination: v, weight: 50}], u: {destination: "z", weight: 30}, t: [], '
                'c: [{destination: x, weight: 70, cluster: one}, {destination: y, weight: 70, '
                'cluster: two}, {destination: z, weight: 100}] }',
    "an account's": "accounts { A: { users: [{user: a, password: a}], mappings { a: b }, "
                    'maps { "c.*": [{destination: "d.$1", weight: 100%}] } }, B: {} }',
}

BAD = [
    ("invalid source", 'mappings { "a..b": x }', "2:1",
     'Subject "a..b" is not a valid subject'),
    ("invalid source in an account", 'accounts { A: { mappings { "a b": c } } }', "2:17",
     'Subject "a b" is not a valid subject'),
    ("wildcard of a literal source", 'mappings { q: "x.$1" }', "2:12",
     'Error adding mapping for "q" to "x.$1" : invalid mapping destination: wildcard index '
     "out of range in $1"),
    ("function of a literal source", 'mappings { q: "x.{{splitfromleft(1,2)}}" }', "2:12",
     'Error adding mapping for "q" to "x.{{splitfromleft(1,2)}}" : invalid mapping '
     "destination: wildcard index out of range in {{splitfromleft(1,2)}}"),
    ("wildcard out of range", 'mappings { "a.*.x": "b.{{partition(3,2)}}" }', "2:13",
     'Error adding mapping for "a.*.x" to "b.{{partition(3,2)}}" : invalid mapping '
     "destination: wildcard index out of range in {{partition(3,2)}}: [2]"),
    ("a * in the destination", 'mappings { "a.*": "b.*" }', "2:13",
     'Error adding mapping for "a.*" to "b.*" : invalid subject'),
    ("> on one side", 'mappings { "a.>": "b" }', "2:13",
     'Error adding mapping for "a.>" to "b" : invalid subject'),
    ("a token after >", 'mappings { "a.>": "b.>.c" }', "2:13",
     'Error adding mapping for "a.>" to "b.>.c" : invalid mapping destination: invalid '
     "transform in c"),
    ("an empty token", 'mappings { "a.*": "b..$1" }', "2:13",
     'Error adding mapping for "a.*" to "b..$1" : invalid mapping destination: invalid '
     "transform"),
    ("a blank", 'mappings { "a.*": "b. x" }', "2:13",
     'Error adding mapping for "a.*" to "b. x" : invalid mapping destination: invalid '
     "transform"),
    ("unknown function", 'mappings { "a.*": "b.{{foo(1)}}" }', "2:13",
     'Error adding mapping for "a.*" to "b.{{foo(1)}}" : invalid mapping destination: unknown '
     "function in {{foo(1)}}"),
    ("function name cases", 'maps { "a": "x.{{ RANDOM(3) }}" }', "2:9",
     'Error adding mapping for "a" to "x.{{ RANDOM(3) }}" : invalid mapping destination: '
     "unknown function in {{ RANDOM(3) }}"),
    ("no argument", 'mappings { "a.*": "b.{{wildcard()}}" }', "2:13",
     'Error adding mapping for "a.*" to "b.{{wildcard()}}" : invalid mapping destination: not '
     "enough arguments passed to the function in {{wildcard()}}"),
    ("too many arguments", 'maps { "a.*.*": "x.{{splitfromleft(1,2,3)}}" }', "2:9",
     'Error adding mapping for "a.*.*" to "x.{{splitfromleft(1,2,3)}}" : invalid mapping '
     "destination: too many arguments passed to the function in {{splitfromleft(1,2,3)}}"),
    ("random of two", 'maps { "a.*.*": "x.{{random(1,2)}}" }', "2:9",
     'Error adding mapping for "a.*.*" to "x.{{random(1,2)}}" : invalid mapping destination: '
     "not enough arguments passed to the function in {{random(1,2)}}"),
    ("not a number", 'maps { "a.*.*": "x.{{partition(a)}}" }', "2:9",
     'Error adding mapping for "a.*.*" to "x.{{partition(a)}}" : invalid mapping destination: '
     "function argument is invalid or in the wrong format in {{partition(a)}}"),
    ("past int32", 'maps { "a.*": "x.{{slicefromleft(1,3000000000)}}" }', "2:9",
     'Error adding mapping for "a.*" to "x.{{slicefromleft(1,3000000000)}}" : invalid mapping '
     "destination: function argument is invalid or in the wrong format in "
     "{{slicefromleft(1,3000000000)}}"),
    ("total weight", 'mappings { w: [{destination: x, weight: 40%}, {destination: y, '
     "weight: 70%}] }", "2:12", 'Error adding mapping for "w" : total weight needs to be <= 100'),
    ("duplicate destination", "mappings { a: [{destination: b, weight: 50}, {destination: b, "
     "weight: 10}] }", "2:12", 'Error adding mapping for "a" : duplicate entry for "b"'),
    ("a weight over 100", "mappings { a: {destination: b, weight: 101} }", "2:32",
     "Invalid weight 101 for mapping destination"),
    ("a percentage over 100", 'mappings { a: {destination: b, weight: "101%"} }', "2:32",
     "Invalid weight 101 for mapping destination"),
    ("a negative weight", "mappings { a: {destination: b, weight: -1} }", "2:32",
     "Invalid weight -1 for mapping destination"),
    ("a weight not a number", 'mappings { a: [{destination: x, weight: "abc"}] }', "2:33",
     'Invalid weight "abc" for mapping destination'),
    ("a weight of a float", "mappings { a: {destination: b, weight: 5.5} }", "2:32",
     "Unknown entry type for weight of 5.5"),
    ("a weight of a boolean", "mappings { a: [{destination: b, weight: true}] }", "2:33",
     "Unknown entry type for weight of true"),
    ("no weight", "mappings {\nt: [{destination: x}] }", "3:21",
     'Missing weight for mapping destination "x"'),
    ("an empty entry", "mappings { a: {} }", "2:12", 'Missing weight for mapping destination ""'),
    ("an unknown field", "mappings { a: [{destination: x, weight: 1, foo: 1}] }", "2:44",
     'Unknown field "foo" for mapping destination'),
    ("not an entry", "mappings { a: true }", "2:12", "Expected an entry for the mapping destination"),
]


@pytest.mark.parametrize("text", GOOD.values(), ids=GOOD.keys())
def test_good_mappings_are_taken_by_both(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "good.conf"
    conf.write_text("port: -1\n" + text + "\n")
    ref = reference("-t", "-c", str(conf))
    assert ref.returncode == 0, ref.stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 0, ours.stderr


@pytest.mark.parametrize(("text", "where", "message"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_mappings_are_refused_by_both_alike(tmp_path: Path, text: str, where: str,
                                                message: str) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text("port: -1\n" + text + "\n")
    line = f"{conf}:{where}: {message}"
    ref = reference("-t", "-c", str(conf))
    assert ref.returncode == 1 and line in ref.stderr.splitlines()[0], ref.stderr
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and ours.stderr.strip().endswith(line), ours.stderr
    assert "Traceback" not in ours.stderr


@pytest.mark.parametrize("text", ['mappings { "b.*": "" }', "mappings { c: [{weight: 50}] }"])
def test_an_empty_destination_is_refused_where_the_reference_fails_later(
        tmp_path: Path, text: str) -> None:
    conf = tmp_path / "empty.conf"
    conf.write_text("port: -1\n" + text + "\n")
    assert reference("-t", "-c", str(conf)).returncode == 0
    ours = tidings("-t", "-c", str(conf))
    assert ours.returncode == 1 and "an empty destination is not supported by tidings" in \
        ours.stderr, ours.stderr
