"""The reference speculative-decoding engine: model, KV cache, sampling, the SD step, runner."""
