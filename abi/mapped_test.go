package abi

// mappedABI is KindRegMRMapped's part of the ABI by the C header's names
// (goABI).
var mappedABI = map[string]int64{"K_REG_MR_MAPPED": int64(KindRegMRMapped)}
