"""`searchqa` and `searchqa_data`: question answering by search with the Search-R1 protocol.

  env.py        the protocol (SearchQABase: <search> / <answer> turns, exact-match reward) and `searchqa`
  kb.py         the generated knowledge base of fictional entities and its 1-3 hop questions
  retrieval.py  the <information> block and the remote (HTTP) retriever
  data.py       `searchqa_data`: user QA files over a JSONL corpus (BM25, disk-cached) or a retriever URL
"""

from prover_jax.envs.searchqa.data import DataError, SearchQAData, load_corpus, load_qa
from prover_jax.envs.searchqa.env import (SYSTEM_PROMPT, SearchQA, SearchQABase, SearchQAState, exact_match,
                                          find_blocks, knowledge_base, normalize_answer, question_key, token_f1)
from prover_jax.envs.searchqa.kb import KnowledgeBase, Question
from prover_jax.envs.searchqa.retrieval import HttpRetriever, RetrievalError, format_information

__all__ = ["SYSTEM_PROMPT", "DataError", "HttpRetriever", "KnowledgeBase", "Question", "RetrievalError", "SearchQA",
           "SearchQABase", "SearchQAData", "SearchQAState", "exact_match", "find_blocks", "format_information",
           "knowledge_base", "load_corpus", "load_qa", "normalize_answer", "question_key", "token_f1"]
