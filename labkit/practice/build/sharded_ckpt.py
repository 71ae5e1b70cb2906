"""Build-it exercise sharded_ckpt (issue 31, B2): being written."""
