package proxy

import (
	"context"
	"net/http"
	"net/http/pprof"

	"github.com/valyala/fasthttp"
)

// pprofPrefix is where [admin] pprof serves Go's runtime profiles.
const pprofPrefix = "/loopguard/debug/pprof/"

// withPprof serves Go's runtime profiles (net/http/pprof) under pprofPrefix
// through guard, which applies the admin API's access rule, and every
// other request under /loopguard/ through admin.
func withPprof(admin fasthttp.RequestHandler, guard func(http.Handler) http.Handler, stopping context.Context) fasthttp.RequestHandler {
	mux := http.NewServeMux()
	// pprof's handlers expect /debug/pprof/: the index names a profile by
	// what follows it.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	profiles := withLocalAddr(guard(http.StripPrefix("/loopguard", mux)), stopping)
	return func(ctx *fasthttp.RequestCtx) {
		if hasPrefixBytes(ctx.Path(), pprofPrefix) {
			profiles(ctx)
			return
		}
		admin(ctx)
	}
}
