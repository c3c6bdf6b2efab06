package inspect_test

import (
	"fmt"
	"strings"

	"github.com/loopguard/loopguard/inspect"
)

// A proxy feeds each content delta as it forwards it and cuts the stream
// once Write reports true.
func ExampleDegeneration() {
	d := inspect.NewDegeneration(inspect.StreamConfig{}) // zero value: defaults
	deltas := []string{"Let me fix the build.\n\n", "", strings.Repeat("Wait, I'll check the config again. ", 12)}
	for _, delta := range deltas {
		if d.Write([]byte(delta)) {
			det := d.Detection()
			fmt.Printf("cut: %s at byte %d, %q x%d (threshold %d)\n",
				det.Category, d.Offset(), det.Evidence.Element, det.Evidence.Count, det.Evidence.Threshold)
			return
		}
	}
	fmt.Println("healthy")
	// Output:
	// cut: token_degeneration at byte 23, "Wait, I'll check the config again. " x10 (threshold 10)
}
