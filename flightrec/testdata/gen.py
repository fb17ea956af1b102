#!/usr/bin/env python3
"""Writes the flight recorder dumps the flightrec tests read.

Most are written the way PyTorch's C++ pickler writes them
(torch/csrc/jit/serialization/pickler.cpp, called by pickle_str with
tag_aggregates=false): PROTO 2; BINUNICODE strings memoized by value with
BINPUT, repeats as BINGET (LONG_BINPUT/LONG_BINGET past memo 255); BININT1,
BININT2, BININT or LONG1 of 8 bytes; NEWTRUE/NEWFALSE; NONE; BINFLOAT;
EMPTY_TUPLE, TUPLE1..3 or MARK..TUPLE; EMPTY_LIST MARK .. APPENDS;
EMPTY_DICT MARK .. SETITEMS; a container shared by pointer gets a BINPUT
after it and BINGET when seen again. The same data also goes through
Python's own pickle at protocols 0, 1, 2, 4 and 5.

Run it from anywhere: python3 flightrec/testdata/gen.py
"""

import os
import pickle
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


class Shared:
    """A container held by more than one IValue: memoized by pointer."""

    def __init__(self, obj):
        self.obj = obj


class Global:
    """A torch.jit._pickle helper called through REDUCE (tagged dumps)."""

    def __init__(self, name, *args):
        self.name = name
        self.args = args


class CppPickler:
    def __init__(self, tag_aggregates=False):
        self.out = bytearray()
        self.memo_id = 0
        self.strings = {}
        self.globals = {}
        self.shared = {}
        self.tag = tag_aggregates

    def next_put(self):
        i = self.memo_id
        if i <= 255:
            self.out += b"q" + bytes([i])
        else:
            self.out += b"r" + struct.pack("<I", i)
        self.memo_id += 1
        return i

    def get(self, i):
        if i <= 255:
            self.out += b"h" + bytes([i])
        else:
            self.out += b"j" + struct.pack("<I", i)

    def string(self, s):
        if s in self.strings:
            self.get(self.strings[s])
            return
        b = s.encode()
        self.out += b"X" + struct.pack("<I", len(b)) + b
        self.strings[s] = self.next_put()

    def integer(self, n):
        if 0 <= n <= 0xFF:
            self.out += b"K" + struct.pack("<B", n)
        elif 0 <= n <= 0xFFFF:
            self.out += b"M" + struct.pack("<H", n)
        elif -(2**31) <= n < 2**31:
            self.out += b"J" + struct.pack("<i", n)
        else:
            self.out += b"\x8a\x08" + struct.pack("<q", n)

    def global_(self, mod, name):
        key = mod + "\n" + name + "\n"
        if key in self.globals:
            self.get(self.globals[key])
            return
        self.out += b"c" + key.encode()
        self.globals[key] = self.next_put()

    def type_tag_start(self):
        if self.tag:
            self.global_("torch.jit._pickle", "restore_type_tag")

    def type_tag_end(self, annotation):
        if self.tag:
            self.string(annotation)
            self.out += b"\x86R"  # TUPLE2 REDUCE

    def value(self, v):
        if isinstance(v, Shared):
            if id(v) in self.shared:
                self.get(self.shared[id(v)])
                return
            self.value(v.obj)
            self.shared[id(v)] = self.next_put()
        elif isinstance(v, Global):
            # pushSpecializedList: GLOBAL, MARK, EMPTY_LIST, MARK, items,
            # APPENDS, TUPLE, REDUCE
            self.global_("torch.jit._pickle", v.name)
            self.out += b"(]("
            for it in v.args[0]:
                self.value(it)
            self.out += b"etR"
        elif v is None:
            self.out += b"N"
        elif v is True:
            self.out += b"\x88"
        elif v is False:
            self.out += b"\x89"
        elif isinstance(v, int):
            self.integer(v)
        elif isinstance(v, float):
            self.out += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            self.string(v)
        elif isinstance(v, tuple):
            if len(v) == 0:
                self.out += b")"
            elif len(v) <= 3:
                for it in v:
                    self.value(it)
                self.out += bytes([0x84 + len(v)])
            else:
                self.out += b"("
                for it in v:
                    self.value(it)
                self.out += b"t"
        elif isinstance(v, list):
            self.type_tag_start()
            self.out += b"]("
            for it in v:
                self.value(it)
            self.out += b"e"
            self.type_tag_end("List[Any]")
        elif isinstance(v, dict):
            self.type_tag_start()
            self.out += b"}("
            for k, it in v.items():
                self.value(k)
                self.value(it)
            self.out += b"u"
            self.type_tag_end("Dict[Any, Any]")
        else:
            raise TypeError(type(v))

    def dumps(self, v):
        self.out += b"\x80\x02"
        self.value(v)
        self.out += b"."
        return bytes(self.out)


def plain(v):
    """The value as Python's pickle sees it: no Shared wrappers."""
    if isinstance(v, Shared):
        return plain(v.obj)
    if isinstance(v, Global):
        return [plain(x) for x in v.args[0]]
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, tuple):
        return tuple(plain(x) for x in v)
    if isinstance(v, dict):
        return {plain(k): plain(x) for k, x in v.items()}
    return v


T0 = 1_760_000_000_000_000_000  # time_created_ns of the first entry
FRAMES = [
    Shared({"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2806}),
    Shared({"name": "wrapper", "filename": "torch/distributed/c10d_logger.py", "line": 81}),
    Shared({"name": "train_step", "filename": "/job/train.py", "line": 42}),
    Shared({"name": "<module>", "filename": "/job/train.py", "line": 90}),
]


class Recorder:
    """One rank's ring buffer, as FlightRecorder::getCollectiveTrace
    writes its entries (version 2.10 key order)."""

    def __init__(self, rank, stacks=True):
        self.rank = rank
        self.entries = []
        self.stacks = stacks
        self.seq = {}
        self.p2p = {}

    def record(self, pg, op, state, p2p=False, sizes=(1024,)):
        name, desc, uid = pg
        if p2p:
            self.p2p[name] = self.p2p.get(name, 0) + 1
        else:
            self.seq[name] = self.seq.get(name, 0) + 1
        i = len(self.entries)
        t = T0 + i * 1_000_000 + self.rank * 1000
        e = {}
        if self.stacks:
            e["frames"] = FRAMES[:] if i % 2 == 0 else FRAMES[1:]
        e.update({
            "record_id": i,
            "pg_id": uid,
            "process_group": (name, desc),
            "thread_name": "pt_main_thread",
            "thread_id": "139872345679872",
            "collective_seq_id": self.seq.get(name, 0),
            "p2p_seq_id": self.p2p.get(name, 0),
            "op_id": i + 1,
            "profiling_name": "nccl:" + op,
            "time_created_ns": t,
        })
        if state == "completed":
            e["duration_ms"] = 0.25
        e.update({
            "input_sizes": [list(sizes)],
            "input_dtypes": ["Float"],
            "output_sizes": [list(sizes)],
            "output_dtypes": ["Float"],
            "state": state,
            "time_discovered_started_ns": None if state == "scheduled" else t + 100,
            "time_discovered_completed_ns": t + 200 if state == "completed" else None,
            "retired": state == "completed",
            "timeout_ms": 600000,
            "is_p2p": p2p,
        })
        self.entries.append(e)


DEFAULT = ("0", "default_pg", 0)
SUB = ("1", "undefined", 1)


def top(rank, rec, groups, status):
    pg_config = {}
    for name, desc, ranks in groups:
        pg_config[name] = {"name": name, "desc": desc, "ranks": "[" + ", ".join(map(str, ranks)) + "]"}
    return Shared({
        "version": "2.10",
        "pg_config": pg_config,
        "comm_lib_version": "2.27.3",
        "pg_status": status,
        "entries": rec.entries,
        "nccl_comm_state": {"0x5cf1a2b3": {"rank": str(rank), "status": "ok"}},
    })


def hang4():
    """Rank 2 of 4 stopped before its 21st all_reduce; ranks 0 and 1 also
    share group 1, level at its 3rd all_gather, and sent one tensor."""
    dumps = {}
    for rank in range(4):
        rec = Recorder(rank)
        for s in range(1, 21):
            rec.record(DEFAULT, "all_reduce", "completed")
            if rank in (0, 1) and s in (5, 10, 15):
                rec.record(SUB, "_allgather_base", "completed", sizes=(2, 512))
            if rank in (0, 1) and s == 12:
                rec.record(SUB, "send 0->1" if rank == 0 else "recv 1<-0", "completed", p2p=True)
        if rank != 2:
            rec.record(DEFAULT, "all_reduce", "scheduled")
        groups = [("0", "default_pg", [0, 1, 2, 3])]
        if rank in (0, 1):
            groups.append(("1", "undefined", [0, 1]))
        last = 20 if rank == 2 else 21
        status = {"0": {"last_enqueued_collective": last, "last_started_collective": 20, "last_completed_collective": 20}}
        dumps[rank] = top(rank, rec, groups, status)
    return dumps


def memo_big():
    """Enough distinct strings that the memo passes 255."""
    rec = Recorder(0, stacks=False)
    for i in range(300):
        rec.record(DEFAULT, "all_reduce", "completed")
        rec.entries[-1]["thread_name"] = "worker_%03d" % i
    rec.record(DEFAULT, "broadcast", "started")
    return top(0, rec, [("0", "default_pg", [0, 1])], {})


def old22():
    """PyTorch 2.2: the entries list alone, seq_id and time_created_us."""
    entries = []
    for i in range(3):
        entries.append({
            "pg_id": 0,
            "seq_id": i + 1,
            "profiling_name": "nccl:all_reduce",
            "time_created_us": T0 // 1000 + i,
            "input_sizes": [[4]],
            "output_sizes": [[4]],
            "state": "completed" if i < 2 else "scheduled",
            "retired": i < 2,
            "frames": [FRAMES[2]],
        })
    return entries


def tagged():
    """Aggregates type-tagged (tag_aggregates=true) and an int list made
    by build_intlist, as the C++ pickler writes for other callers."""
    rec = Recorder(0, stacks=False)
    rec.record(DEFAULT, "all_reduce", "completed")
    rec.record(DEFAULT, "all_reduce", "scheduled")
    d = top(0, rec, [("0", "default_pg", [0, 1])], {})
    d.obj["ranks_seen"] = Global("build_intlist", [0, 1])
    return d


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def main():
    for rank, d in hang4().items():
        write("hang4_rank%d.pkl" % rank, CppPickler().dumps(d))
        if rank == 0:
            for proto in (0, 1, 2, 4, 5):
                write("py%d_rank0.pkl" % proto, pickle.dumps(plain(d), protocol=proto))
    write("memo_big.pkl", CppPickler().dumps(memo_big()))
    write("old22.pkl", CppPickler().dumps(old22()))
    write("tagged.pkl", CppPickler(tag_aggregates=True).dumps(tagged()))
    # What a dump must never be: os.system("true") on load.
    write("evil_global.pkl", b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.")
    write("evil_stack_global.pkl", pickle.dumps(struct.Struct, protocol=4))
    # Every C++ dump must load with Python's own pickle too.
    for name in sorted(os.listdir(HERE)):
        if name.endswith(".pkl") and not name.startswith("evil") and name != "tagged.pkl":
            with open(os.path.join(HERE, name), "rb") as f:
                pickle.load(f)


if __name__ == "__main__":
    main()
