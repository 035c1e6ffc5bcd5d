"""Nothing in the workdir lost for good: `confine undo` puts back what a run
removed, replaced or rewrote (issue 25 item 3).

Job: before the broker (mediation/files.py) removes (unlink, rmdir), replaces
(a rename over it), moves away (a rename of it), truncates or opens for
writing a file the workdir held at the start of the run, the supervisor's
keeper (keeper.py) keeps it in the run's undo area: a hard link to the old
inode where the area is on the same mount, else a copy within the run's
bound; a truncation, a write in place, a rename away or a file with other
names is always a copy (a link would share later changes). `confine undo
RUN|--last [PATH...]` (restore.py) puts files back byte for byte with their
mode, owner and times; `confine runs` lists what each run changed. The
count of deletions and overwrites may be put to the person above a
threshold (the run's approval engine); refused, the call fails with EACCES and what the run
deleted so far is put back.

Threat: the agent must not reach what is kept (it would rewrite or remove the
way back), so the undo area lies in the person's state directory
(paths.state_dir("undo"): /var/lib/confine/undo as root, else
$XDG_STATE_HOME/confine/undo), 0700, outside every Landlock grant and never
inside the workdir; the broker, in the agent's domain, cannot write it
either, so it only passes descriptors to the supervisor (client.py), which
links or copies. Names come from the agent: they are escaped when printed,
stored under numbers, and restoring goes by descriptor, one component at a
time, never through a symlink. A file made during the run (its birth time
after the start) is not kept; where the file system has no birth time every
file is taken as old (more is kept, never less).
"""
