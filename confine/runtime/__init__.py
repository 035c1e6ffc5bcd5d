"""Running a plan: the session, the fork, the child's steps, the supervisor."""
