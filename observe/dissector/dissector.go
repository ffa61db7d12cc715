// Package dissector ships mrlab's Wireshark Lua dissector for the MetaRoCE
// wire format (metaroce.lua in this directory; README.md says how to
// install it). The script is embedded so that tools can install or print
// it; its test runs tshark on captures mrlab makes.
package dissector

import _ "embed"

// Lua is the dissector script, metaroce.lua.
//
//go:embed metaroce.lua
var Lua []byte

// FileName is the name to install the script under in a Wireshark plugin
// directory.
const FileName = "metaroce.lua"
