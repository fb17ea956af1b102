// Package pmi is the PMI server an agent runs for its local MPI ranks, so
// that MPICH programs start without mpiexec: PMI-1 "simple" lines and PMI-2
// frames on one connection per rank (PMI_FD socketpair or an accepted
// PMI_PORT connection), answered as MPICH's Hydra proxy answers them.
//
// Decisions:
//   - As Hydra's proxy does, a node answers init, get_maxes, get_appnum,
//     get_my_kvsname, get_universe_size (the world size) and
//     PMI_process_mapping itself; puts and gets go to the Backend, which is
//     the job's KV across nodes. Puts are written through at once, not held
//     until the barrier: a Backend then needs no flush.
//   - barrier_in and kvs-fence are one node barrier: the last of Job.Local
//     ranks to enter calls Backend.Barrier once (numbered 0, 1, …), then
//     every local rank gets its answer. A rank that dies inside a barrier is
//     seen by the agent (the process exits) and the agent cancels ctx.
//   - Escaping follows MPICH's newer v1 parser: in a value a backslash takes
//     the next byte literally ("a\ b" is "a b", "a\\b" is `a\b`), and values
//     sent back escape ' ' and '\', so a client reads back what it put.
//     MPICH 4.0.2 does not unescape; its values (hex) hold neither. Error
//     texts in msg= have '_' for spaces so that 4.0.2 reads them whole.
//     PMI-2 values are not escaped; a stored value one framing cannot carry
//     (a ';' for PMI-2, a newline for PMI-1) is answered as an error.
//   - Bounds: a v1 line is at most 1024 bytes with its newline (MPICH 4.0.2's
//     PMIU_MAXLINE), a v2 frame body 16 KiB, keys 64 and values 1024 bytes
//     (the get_maxes answer, Hydra's), 16384 puts per rank and 2^20 per job
//     on a node, 1024 node attributes. A line or frame over its bound, bad
//     syntax, or an unknown PMI-1 command closes the connection
//     (Result.Err); errors the protocol can answer (put, get, every PMI-2
//     command) get rc=-1.
//   - init answers the version asked: 1.0 or 1.1, 1.1 for a newer 1.x (so
//     no 1.2 group barriers), and pmi_version=2 switches the connection to
//     PMI-2 framing. spawn, publish/unpublish/lookup_name and their PMI-2
//     forms are answered rc=-1 "… is not supported by this process manager".
//   - abort ends Serve with Result.Aborted; without exitcode= (MPICH's PMI-2
//     client sends none) the exit code is 1. The agent must kill the aborting
//     rank too: MPICH 4.0.2 does not exit after abort (seen: it reports
//     "readline failed" when the connection closes, then hangs). A close
//     before finalize is Result.Err. Serve closes the connection when it
//     returns.
//   - Prefer PMI_FD: a socketpair reaches only its rank, while a PMI_PORT
//     listener on TCP, loopback included, is reachable by any local user.
package pmi
