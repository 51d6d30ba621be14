"""Cross-language golden files (event/testdata/golden): the Python codec
writes python.packed and python.single.json, and decodes Go's go.packed and
go.single.json, and the Node package's node.packed and node.single.json, to
the events of events.json. The Go side (event/golden_test.go) and the Node
side (clients/node/test/golden.test.js) decode the Python files. Set
LOCKSCOPE_UPDATE_GOLDEN=1 to rewrite the Python files."""

import json
import os

import pytest

from lockscope import event as ev

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "event", "testdata", "golden")
UPDATE = os.environ.get("LOCKSCOPE_UPDATE_GOLDEN") == "1"


def golden_events():
    with open(os.path.join(GOLDEN, "events.json"), encoding="utf-8") as f:
        doc = json.load(f)
    out = []
    for g in doc["events"]:
        g = dict(g)
        if "key_hex" in g:
            g["key"] = bytes.fromhex(g.pop("key_hex"))
        out.append(ev.Event(**g))
    assert len(out) >= len(ev.TYPES)
    assert {e.type for e in out} == set(ev.TYPES), "events.json must hold every type"
    return out


def singles_json(events):
    lines = []
    for e in events:
        pairs = []
        for name, v in ev.fields(e).items():
            if isinstance(v, bytes):
                try:
                    v = v.decode("utf-8")
                except UnicodeDecodeError:
                    v = {"hex": v.hex()}
            pairs.append([name, v])
        lines.append(json.dumps(pairs, ensure_ascii=False, separators=(",", ":")))
    return ("[\n" + ",\n".join(lines) + "\n]\n").encode("utf-8")


def read_singles(name):
    with open(os.path.join(GOLDEN, name), encoding="utf-8") as f:
        entries = json.load(f)
    out = []
    for pairs in entries:
        fields = {}
        for name, v in pairs:
            fields[name] = bytes.fromhex(v["hex"]) if isinstance(v, dict) else v.encode("utf-8")
        out.append(fields)
    return out


def write_or_compare(name, got):
    path = os.path.join(GOLDEN, name)
    if UPDATE:
        with open(path, "wb") as f:
            f.write(got)
    with open(path, "rb") as f:
        want = f.read()
    assert got == want, "%s differs from what this package encodes (LOCKSCOPE_UPDATE_GOLDEN=1 if meant)" % name


def test_python_encoding_is_golden():
    events = golden_events()
    write_or_compare("python.packed", ev.pack(events))
    write_or_compare("python.ext", ev.pack_ext(events))
    write_or_compare("python.single.json", singles_json(events))


def read(name):
    with open(os.path.join(GOLDEN, name), "rb") as f:
        return f.read()


@pytest.mark.parametrize("lang", ["go", "node"])
def test_packed_bytes_are_the_others(lang):
    events = golden_events()
    assert ev.pack(events) == read(lang + ".packed")
    assert ev.pack_ext(events) == read(lang + ".ext") != b""
    (n, batch, ext), = ev.pack_entries(events)
    assert (n, batch, ext) == (len(events), read("go.packed"), read("go.ext"))


@pytest.mark.parametrize("lang", ["go", "node"])
def test_decodes_packed(lang):
    want = golden_events()
    got = ev.decode({b"v": b"1", b"n": str(len(want)).encode(), b"batch": read(lang + ".packed"), b"x": read(lang + ".ext")})
    assert got == want
    assert isinstance(got[3].key, bytes) and got[3].key == b"\xff\xfek"
    assert got[0].trace_id.hex() == "4bf92f3577b34da6a3ce929d0e0e4736" and got[4].headroom == 19750000000
    # Without the extension: the same events, without their optional fields.
    bare = ev.decode({"v": "1", "n": str(len(want)), "batch": read(lang + ".packed")})
    assert [(e.trace_id, e.span_id, e.headroom) for e in bare] == [(b"", b"", 0)] * len(want)
    for e, w in zip(bare, want):
        e.trace_id, e.span_id, e.headroom = w.trace_id, w.span_id, w.headroom
    assert bare == want


def test_extension_rules_as_go():
    base = [ev.Event("renewed", key="k", ts=1), ev.Event("renewed", key="k", ts=2)]
    entry = lambda x: {"v": "1", "n": "2", "batch": ev.pack(base), "x": x}  # noqa: E731
    # Unknown tags and known tags of another length are skipped.
    got = ev.decode(entry(bytes([1, 12, 7, 2, 0xAB, 0xCD, 1, 3, 1, 2, 3, 3, 1, 5])))
    assert (got[1].trace_id, got[1].headroom) == (b"", 5)
    for bad in (bytes([2, 0]), bytes([1, 0, 0, 0]), bytes([0, 5, 1])):  # beyond, out of order, cut short
        with pytest.raises(ev.DecodeError, match="extension"):
            ev.decode(entry(bad))
    # Bad trace ids in single entries are left out, the event kept.
    f = ev.fields(ev.Event("acquired", key="k", ts=1))
    got = ev.decode(dict(f, trace_id="00000000000000000000000000000000", span_id="xyz", headroom="7"))[0]
    assert (got.trace_id, got.span_id, got.headroom) == (b"", b"", 7)
    with pytest.raises(ev.DecodeError, match="headroom"):
        ev.decode(dict(f, headroom="-1"))
    assert ev.Event("renewed", trace_id=0x4bf92f3577b34da6a3ce929d0e0e4736).trace_id.hex() == \
        "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.mark.parametrize("lang", ["go", "node"])
def test_decodes_single_entries_field_for_field(lang):
    want = golden_events()
    entries = read_singles(lang + ".single.json")
    assert [ev.decode(f)[0] for f in entries] == want
    # The same fields, in the same order, as Python writes them.
    for e, other in zip(want, entries):
        mine = {k: v if isinstance(v, bytes) else v.encode() for k, v in ev.fields(e).items()}
        assert list(mine.items()) == list(other.items())


@pytest.mark.parametrize("entry, message", [
    ({"type": "acquired", "key": "k", "ts": "1"}, "no 'v'"),
    ({"v": "99", "type": "acquired", "key": "k", "ts": "1"}, "unsupported schema version"),
    ({"v": "x"}, "not an integer"),
    ({"v": "1", "type": "exploded", "key": "k", "ts": "1"}, "unknown event type"),
    ({"v": "1", "type": "acquired", "ts": "1"}, "no 'key'"),
    ({"v": "1", "type": "acquired", "key": "k"}, "non-positive 'ts'"),
    ({"v": "1", "type": "acquired", "key": "k", "ts": "1", "fence": "NaN"}, "not an integer"),
    ({"v": "1", "type": "acquired", "key": "k", "ts": "1", "wait": "-5"}, "non-negative"),
    ({"v": "1", "type": "acquired", "key": "x" * (ev.MAX_STRING_LEN + 1), "ts": "1"}, "max 65536"),
    ({"v": "1", "n": "1", "batch": b"\x01\x00" + b"\xff" * 9 + b"\x02"}, "overflows"),
    ({"v": "1", "n": "10001", "batch": b""}, "too large"),
    ({"v": "1", "n": "-1", "batch": b""}, "bad batch count"),
])
def test_decode_rejects_what_go_rejects(entry, message):
    with pytest.raises(ev.DecodeError, match=message):
        ev.decode(entry)


def test_decode_rejects_truncated_and_miscounted_batches():
    events = golden_events()
    good = ev.pack(events)
    n = len(events)
    for batch, count in ((good[:-3], n), (good, n + 1), (good, n - 1)):
        with pytest.raises(ev.DecodeError):
            ev.decode({"v": "1", "n": str(count), "batch": batch})
    bad_type = bytes([99]) + ev.pack(events[:1])[1:]
    with pytest.raises(ev.DecodeError, match="unknown type 99"):
        ev.decode({"v": "1", "n": "1", "batch": bad_type})


def test_docs_example_bytes():
    # docs/events.md, "Packed batch entry": an acquired then a released event, 83 bytes.
    events = [
        ev.Event("acquired", key="job:42", owner="api/h1/7", lease="L1", ts=1700000000000000000, wait=1500000,
                 ttl=30000, attempts=2, fence=5),
        ev.Event("released", key="job:42", owner="api/h1/7", lease="L1", ts=1700000000250000000, hold=250000000),
    ]
    b = ev.pack(events)
    assert len(b) == 83
    assert b.hex() == (
        "0100066a6f623a3432086170692f68312f37024c31000000" "8080d0e2c6bfce972f" "c08db701" "00" "e0d403" "040a00"
        "0300066a6f623a3432086170692f68312f37024c31000000" "80cab5ee01" "0080cab5ee0100000000")


def test_pack_entries_splits_at_the_decoders_limits():
    events = [ev.Event("acquired", key="k%d" % i, ts=i + 1) for i in range(ev.MAX_BATCH_EVENTS + 5)]
    entries = ev.pack_entries(events)
    assert [n for n, _, _ in entries] == [ev.MAX_BATCH_EVENTS, 5]
    got = [e for n, b, x in entries for e in ev.decode(ev.packed_fields(n, b, x))]
    assert got == events
    # The extension splits with its batch; indexes restart in each entry.
    events[0].headroom = 1
    events[-1].trace_id = b"\x01" * 16
    entries = ev.pack_entries(events)
    assert [len(x) > 0 for _, _, x in entries] == [True, True]
    got = [e for n, b, x in entries for e in ev.decode(ev.packed_fields(n, b, x))]
    assert got == events
    big = [ev.Event("released", key="x" * 60000, ts=1) for _ in range(150)]  # 9 MB
    entries = ev.pack_entries(big)
    assert [n for n, _, _ in entries] == [139, 11] and all(len(b) <= ev.MAX_BATCH_BYTES for _, b, _ in entries)
    # The emitter's bound: four of these events to an entry of at most ENTRY_BYTES.
    entries = ev.pack_entries(big, ev.ENTRY_BYTES)
    assert [n for n, _, _ in entries] == [4] * 37 + [2] and all(len(b) <= ev.ENTRY_BYTES for _, b, _ in entries)
    assert [e for n, b, x in entries for e in ev.decode(ev.packed_fields(n, b, x))] == big


def test_partitions_match_go():
    with open(os.path.join(GOLDEN, "go.partitions.json"), encoding="utf-8") as f:
        doc = json.load(f)
    for n, want in doc["streams"].items():
        assert ev.streams("lockscope:events", int(n)) == want
    assert len(doc["keys"]) == 20
    for k in doc["keys"]:
        assert ev.partition_of(bytes.fromhex(k["key_hex"]), k["n"]) == k["partition"], k
