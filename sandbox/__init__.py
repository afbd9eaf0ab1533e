"""The local sandbox: a real Kubernetes control plane, simulated nodes, a real control-plane etcd and
emulated clouds. Used by the integration tests, the benchmarks and the demo; not part of the built
collection."""
