"""The embed head: sentence vectors from any encoder checkpoint (pooled, L2-normalised, compared by cosine), trained
by a loss of its own (SimCSE, CoSENT, MNRL: `losses`) on the one loop, scored as mteb scores C-MTEB's STS sets, saved
as a sentence-transformers folder. `kind` is what `finetune` and `eval suite` ask; `pooling` how tokens become one
vector; `encoder` the model and the encoding of many texts; `head` the loop's head; `folder` the saved layout."""
