// Package chrometest opens pages in headless Chromium for the tests of
// the web view: the in-process ones (monitor) and the one against
// real rnicd processes (tests).
package chrometest

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/rnicd/rnicd/internal/debtest"
)

// Open opens url in a headless Chromium window width by height pixels,
// installing Chromium first where it is missing (debtest.Ensure), and
// returns the tab's context; the browser closes when the test ends.
func Open(t testing.TB, url string, width, height int) context.Context {
	t.Helper()
	chromium := debtest.Ensure(t, "chromium", "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(width, height))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	return ctx
}

// WaitTrue polls a JavaScript expression until it is true, for as long
// as the context it runs in allows: chromedp's own default of 30 s ran
// out before the 90 s the tests give, beside a CPU hog under -race
// (TestWebViewDCQCN 2 runs in 3), where Chromium polls slowly.
func WaitTrue(expr string) chromedp.Action[bool] {
	return chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(0))
}
