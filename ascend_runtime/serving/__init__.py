"""Serving a rendered package on other engines (vLLM, vllm-ascend): the shared parts."""
