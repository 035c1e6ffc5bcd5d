"""The run's record: one hash-chained JSON line per decision, closed by an HMAC.

Every run started by `confine exec` (or the API) writes one record, always: the
mediator's and the name guard's refusals, Landlock's own where the kernel reports
them, the gateway's verdicts, approvals, held files, the exit check's findings and
the final status, each one line through `runtime.events.Events.emit`, the one
entry. The record lies in the person's state directory (`store.py`), out of the
agent's reach; `--log FILE` gets the same bytes.

Threat: whoever can later edit the file (the person's own account, a process of
theirs, an agent of a later run with a write grant that reaches the state
directory by mistake) changes, removes or reorders a line to hide what a run did.
Each line carries the SHA-256 of the line before it (`chain.py`); the closing
line carries an HMAC of the chain's head, keyed with a per-user key the agent
never reads; `confine log verify` names the first line that does not fit. The
agent itself controls how many refusals happen: lines per run are capped and the
store across runs is bounded (protect/keep.py).

    chain.py    the line format, the HMAC, verify (pure: bytes in, verdict out)
    store.py    where records and the key live (per user, 0700/0600)
    writer.py   `Journal`: append with batched fsync, the cap, the closing line
    render.py   one human line per decision; the OCSF and plain JSON export shapes
"""
