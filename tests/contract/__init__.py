"""The product contract read literally, the way an outside acceptance suite would, one file
per area: only public names through their public module paths; real PostgreSQL and real files
throughout."""
