package models

import "golang.org/x/mod/sumdb/note"

// MerkleRootForTest exposes merkleRoot to the external tests.
func MerkleRootForTest(leaves []MerkleHash) MerkleHash { return merkleRoot(leaves) }

// SignerForTest exposes a key's signer, for tests that forge notes.
func SignerForTest(k *CheckpointKey) note.Signer { return k.signer }
