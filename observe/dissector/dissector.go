// Package dissector ships mrlab's Wireshark Lua dissector for the MetaRoCE
// wire format (metaroce.lua in this directory; README.md says how to
// install it). The script is embedded so that tools can install or print
// it; its test runs tshark on captures mrlab makes.
package dissector

import (
	"bytes"
	_ "embed"
)

//go:embed metaroce.lua
var lua []byte

// Lua returns the dissector script, metaroce.lua (a fresh copy).
func Lua() []byte { return bytes.Clone(lua) }

// FileName is the name to install the script under in a Wireshark plugin
// directory.
const FileName = "metaroce.lua"
