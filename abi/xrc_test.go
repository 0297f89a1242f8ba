package abi

// xrcABI is XRC's part of the ABI by the C header's names (goABI).
var xrcABI = map[string]int64{
	"K_OPEN_XRCD": int64(KindOpenXRCD), "K_CLOSE_XRCD": int64(KindCloseXRCD),
	"K_CREATE_XRC_SRQ": int64(KindCreateXRCSRQ), "K_CREATE_XRC_QP": int64(KindCreateXRCQP),
	"K_OPEN_XRCD_FILE": int64(KindOpenXRCDFile),
}
