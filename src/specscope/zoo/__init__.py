"""The bundled models ("zoo"): synthetic tasks, tokenizer, reproducible training, evaluation."""
