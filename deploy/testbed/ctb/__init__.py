"""clavis-testbed: an emulated Slurm cluster of racks, hosts, BMCs and LXC nodes."""
