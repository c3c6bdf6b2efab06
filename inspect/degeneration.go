package inspect

// Degeneration watches one stream of generated text (content or reasoning)
// for degenerate repetition. TEMPORARY CONTRACT STUB.
type Degeneration struct{ n int64 }

// NewDegeneration returns a detector for one stream.
func NewDegeneration(cfg StreamConfig) *Degeneration { return &Degeneration{} }

// Write feeds the next text delta. It reports true once the stream is
// confidently degenerate; later calls keep returning true.
func (d *Degeneration) Write(p []byte) bool { d.n += int64(len(p)); return false }

// Detection returns the finding once Write has reported true.
func (d *Degeneration) Detection() Detection { return Detection{} }

// Offset is the byte offset in the stream's text where the degeneration began.
func (d *Degeneration) Offset() int64 { return 0 }
