"""The vLLM worker's media sidecar: the gateway's Redis protocol v1, without torch."""
