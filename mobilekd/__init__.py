"""mobilekd: from an IB-BERT teacher to a phone-ready MobileBERT, after Sun et al., ACL 2020."""

__version__ = "0.1.0"
