"""Process supervision: spawn, wait, kill the whole group, re-attach after a restart."""
