"""Text data for language modelling: corpora, tokenizers and the on-disk token cache.

    from lengen.data import load_corpus, build_tokenizer, cached_tokens
    corpus = load_corpus("kjv")                       # offline default (or "wikitext-103", ...)
    tok = build_tokenizer("gpt2")                     # tiktoken GPT-2 BPE, offline
    ids = cached_tokens(corpus, "validation", tok)    # numpy memmap, uint16
"""
from lengen.data.corpus import CORPORA, Corpus, load_corpus
from lengen.data.token_cache import cached_tokens
from lengen.data.tokenizers import TOKENIZERS, Tokenizer, build_tokenizer
from lengen.fileio import default_cache_dir

__all__ = ["CORPORA", "Corpus", "load_corpus", "TOKENIZERS", "Tokenizer", "build_tokenizer",
           "cached_tokens", "default_cache_dir"]
