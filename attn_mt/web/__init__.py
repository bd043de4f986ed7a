"""HTTP plumbing that `attn-mt serve` (serving/) and `attn-mt lab` (lab/) share: the Host/Origin guard,
the one shape of an error answer and its handlers, the body limit, and binding the listening socket."""
