"""What several methods share: tree drafting over a feature head (EAGLE, EAGLE-3), the retrieval datastore
(REST, SAM-Decoding), the best-first frequency tree (SuffixDecoding, REST), the target layers a drafter reads
(EAGLE-3, DFlash), and where shipped drafters live."""
