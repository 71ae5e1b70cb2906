"""Build-it exercise act_offload (issue 31, B2): being written."""
