"""Token corpora: the token files, the document-boundary index, and the packer."""
