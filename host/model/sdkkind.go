package model

// SDKName is the sdk.ModelErrorKind name of the kind: the
// SDK's set is smaller, as an executor branches only on what it can act on.
func (k ErrorKind) SDKName() string {
	switch k {
	case KindAuth, KindRateLimited, KindServer, KindTimeout, KindBadResponse,
		KindTransport, KindBadReply, KindContextExceeded:
		return k.String()
	case KindCanceled:
		return KindTimeout.String()
	case KindRequest, KindScript:
		return KindRequest.String()
	}
	return KindBadResponse.String()
}
