-- metaroce.lua: Wireshark dissector for mrlab's MetaRoCE wire format,
-- version 2 (docs/metaroce-wire.md; transport/metaroce/wire is the
-- executable form). Install: see dissector/README.md.
--
-- A MetaRoCE packet is the payload of a UDP datagram to port 4796:
--
--   common header (16) | type header | payload | CRC32C (4)
--
-- Every header field gets a filterable field (metaroce.*), flags are bit
-- fields, an ACK's 256-bit SACK vector is shown as the set of PSNs it
-- acknowledges (metaroce.ack.sacked_psn, one per PSN), an ACK's further
-- path records are a subtree each (metaroce.ack.record.*), and the CRC32C
-- trailer is verified (metaroce.crc.status).
--
-- Works with Wireshark 3.6+ (Lua 5.2: bit32) and 4.x (Lua 5.4).

local VERSION = 2
local DEFAULT_PORT = 4796

local metaroce = Proto("metaroce", "MetaRoCE (mrlab wire format)")

-- Bit operations: bit32 (Lua 5.2) or LuaBitOp, whichever Wireshark ships.
local bitlib = bit32 or bit
local band, bor, bxor, rshift = bitlib.band, bitlib.bor, bitlib.bxor, bitlib.rshift

local function u32(v)
	if v < 0 then
		return v + 4294967296
	end
	return v
end

---------------------------------------------------------------------------
-- Value strings

local types = {
	[1] = "WRITE", [2] = "SEND", [3] = "READ_REQ", [4] = "READ_RESP",
	[5] = "ACK", [6] = "NAK", [7] = "PROBE", [8] = "SYN", [9] = "SYN_ACK",
	[10] = "EST", [11] = "CLOSE", [12] = "CLOSE_ACK",
}

local nak_reasons = { [1] = "RNR (no receive posted)", [2] = "Remote access error", [3] = "Invalid request" }

-- Smallest packet of each type, trailer excluded.
local min_size = {
	[1] = 64, [2] = 64, [3] = 64, [4] = 64, [5] = 64, [6] = 32, [7] = 16,
	[8] = 52, [9] = 52, [10] = 16, [11] = 16, [12] = 16,
}

local TRAILER = 4

---------------------------------------------------------------------------
-- Fields

local f = {}
-- Common header.
f.version  = ProtoField.uint8("metaroce.version", "Version", base.DEC, nil, 0xF0)
f.type     = ProtoField.uint8("metaroce.type", "Type", base.DEC, types, 0x0F)
f.flags    = ProtoField.uint8("metaroce.flags", "Flags", base.HEX)
f.fl_first = ProtoField.bool("metaroce.flags.first", "FIRST (first chunk of message)", 8, nil, 0x80)
f.fl_last  = ProtoField.bool("metaroce.flags.last", "LAST (last chunk of message)", 8, nil, 0x40)
f.fl_ackrq = ProtoField.bool("metaroce.flags.ackreq", "ACKREQ (acknowledge at once)", 8, nil, 0x20)
f.fl_retx  = ProtoField.bool("metaroce.flags.retx", "RETX (retransmission)", 8, nil, 0x10)
f.fl_imm   = ProtoField.bool("metaroce.flags.imm", "IMM (immediate data valid)", 8, nil, 0x08)
f.fl_abort = ProtoField.bool("metaroce.flags.abort", "ABORT (chunk abandoned)", 8, nil, 0x04)
f.fl_ece   = ProtoField.bool("metaroce.flags.ece", "ECE (CE-marked data arrived)", 8, nil, 0x02)
f.fl_busy  = ProtoField.bool("metaroce.flags.busy", "BUSY (ACK: the receiver answers CE marks on its busy link)", 8, nil, 0x01)
f.path     = ProtoField.uint8("metaroce.path", "Path", base.DEC)
f.gen      = ProtoField.uint8("metaroce.gen", "Path generation", base.DEC)
f.dst_conn = ProtoField.uint32("metaroce.dst_conn", "Destination connection", base.DEC)
f.psn      = ProtoField.uint32("metaroce.psn", "PSN", base.DEC)
f.ts       = ProtoField.uint32("metaroce.ts", "Timestamp (ns mod 2^32)", base.DEC)

-- Data header (WRITE, SEND, READ_REQ, READ_RESP).
f.stream      = ProtoField.uint16("metaroce.data.stream", "Stream", base.DEC)
f.stream_prev = ProtoField.uint16("metaroce.data.stream_prev", "Previous open message of stream (msn distance)", base.DEC)
f.msn         = ProtoField.uint32("metaroce.data.msn", "MSN", base.DEC)
f.msn_base    = ProtoField.uint32("metaroce.data.msn_base", "Oldest uncompleted MSN", base.DEC)
f.dsn         = ProtoField.uint32("metaroce.data.dsn", "DSN", base.DEC)
f.msg_len     = ProtoField.uint32("metaroce.data.msg_len", "Message length", base.DEC)
f.offset      = ProtoField.uint32("metaroce.data.offset", "Offset", base.DEC)
f.addr        = ProtoField.uint64("metaroce.data.addr", "Placement address", base.HEX)
f.key         = ProtoField.uint32("metaroce.data.key", "Memory key", base.HEX)
f.token       = ProtoField.uint32("metaroce.data.token", "Receive token", base.DEC)
f.imm         = ProtoField.uint32("metaroce.data.imm", "Immediate data / abort status", base.HEX)
f.demand      = ProtoField.uint32("metaroce.data.demand", "Demand (kB/s)", base.DEC)
f.payload_len = ProtoField.uint32("metaroce.data.payload_len", "Payload length", base.DEC)
f.payload     = ProtoField.bytes("metaroce.data.payload", "Payload")
f.sink        = ProtoField.none("metaroce.sink", "Sink")
f.sink_addr   = ProtoField.uint64("metaroce.sink.addr", "Sink address", base.HEX)
f.sink_len    = ProtoField.uint32("metaroce.sink.len", "Sink length", base.DEC)
f.sink_lkey   = ProtoField.uint32("metaroce.sink.lkey", "Sink lkey", base.HEX)

-- ACK.
f.cack        = ProtoField.uint32("metaroce.ack.cack", "Cumulative ACK (next expected PSN)", base.DEC)
f.echo_ts     = ProtoField.uint32("metaroce.ack.echo_ts", "Echoed timestamp", base.DEC)
f.ce_count    = ProtoField.uint16("metaroce.ack.ce_count", "CE count (mod 2^16)", base.DEC)
f.rx_count    = ProtoField.uint16("metaroce.ack.rx_count", "Received count (mod 2^16)", base.DEC)
f.rate_hint   = ProtoField.uint32("metaroce.ack.rate_hint", "Rate hint (kB/s)", base.DEC)
f.ack_records = ProtoField.uint8("metaroce.ack.records", "Further path records", base.DEC)
f.ack_rsvd    = ProtoField.uint24("metaroce.ack.reserved", "Reserved", base.HEX)
f.rec         = ProtoField.none("metaroce.ack.record", "Path record")
f.rec_path    = ProtoField.uint8("metaroce.ack.record.path", "Path", base.DEC)
f.rec_gen     = ProtoField.uint8("metaroce.ack.record.gen", "Generation", base.DEC)
f.rec_flags   = ProtoField.uint8("metaroce.ack.record.flags", "Record flags", base.HEX)
f.rec_fl_sack = ProtoField.bool("metaroce.ack.record.flags.sack", "SACK vector follows", 8, nil, 0x01)
f.rec_fl_ece  = ProtoField.bool("metaroce.ack.record.flags.ece", "ECE (CE-marked data arrived)", 8, nil, 0x02)
f.rec_rsvd    = ProtoField.uint8("metaroce.ack.record.reserved", "Reserved", base.HEX)
f.rec_cack    = ProtoField.uint32("metaroce.ack.record.cack", "Cumulative ACK (next expected PSN)", base.DEC)
f.rec_echo_ts = ProtoField.uint32("metaroce.ack.record.echo_ts", "Echoed timestamp", base.DEC)
f.rec_ce      = ProtoField.uint16("metaroce.ack.record.ce_count", "CE count (mod 2^16)", base.DEC)
f.rec_rx      = ProtoField.uint16("metaroce.ack.record.rx_count", "Received count (mod 2^16)", base.DEC)
f.rec_sack    = ProtoField.bytes("metaroce.ack.record.sack", "SACK bitvector")
f.rec_sack_set = ProtoField.string("metaroce.ack.record.sack_set", "SACKed set")
f.sack        = ProtoField.bytes("metaroce.ack.sack", "SACK bitvector")
f.sack_count  = ProtoField.uint16("metaroce.ack.sack_count", "SACKed PSNs", base.DEC)
f.sack_set    = ProtoField.string("metaroce.ack.sack_set", "SACKed set")
f.sacked_psn  = ProtoField.uint32("metaroce.ack.sacked_psn", "SACKed PSN", base.DEC)

-- NAK.
f.nak_reason  = ProtoField.uint8("metaroce.nak.reason", "Reason", base.DEC, nak_reasons)
f.nak_rsvd    = ProtoField.uint8("metaroce.nak.reserved", "Reserved", base.HEX)
f.nak_stream  = ProtoField.uint16("metaroce.nak.stream", "Stream", base.DEC)
f.nak_msn     = ProtoField.uint32("metaroce.nak.msn", "MSN", base.DEC)
f.nak_dsn     = ProtoField.uint32("metaroce.nak.dsn", "DSN", base.DEC)
f.nak_echo_ts = ProtoField.uint32("metaroce.nak.echo_ts", "Echoed timestamp", base.DEC)

-- SYN / SYN_ACK.
f.src_conn    = ProtoField.uint32("metaroce.setup.src_conn", "Source connection", base.DEC)
f.ack_delay   = ProtoField.uint32("metaroce.setup.ack_delay", "Largest ACK delay (ns)", base.DEC)
f.service     = ProtoField.uint16("metaroce.setup.service", "Service (port)", base.DEC)
f.setup_rsvd3 = ProtoField.uint16("metaroce.setup.reserved3", "Reserved", base.HEX)
f.nonce       = ProtoField.uint64("metaroce.setup.nonce", "Nonce", base.HEX)
f.paths       = ProtoField.uint16("metaroce.setup.paths", "Paths", base.DEC)
f.ports       = ProtoField.uint8("metaroce.setup.ports", "Ports (planes)", base.DEC)
f.setup_rsvd2 = ProtoField.uint8("metaroce.setup.reserved2", "Reserved", base.HEX)
f.mtu         = ProtoField.uint16("metaroce.setup.mtu", "Path MTU", base.DEC)
f.msg_window  = ProtoField.uint16("metaroce.setup.msg_window", "Message window", base.DEC)
f.dsn_window  = ProtoField.uint32("metaroce.setup.dsn_window", "Chunk (DSN) window", base.DEC)
f.line_rate   = ProtoField.uint32("metaroce.setup.line_rate", "Line rate (Mb/s)", base.DEC)

-- Trailer.
f.crc         = ProtoField.uint32("metaroce.crc", "CRC32C", base.HEX)
f.crc_status  = ProtoField.uint8("metaroce.crc.status", "CRC32C status", base.DEC, { [0] = "Bad", [1] = "Good" })
f.crc_calc    = ProtoField.uint32("metaroce.crc.computed", "CRC32C computed", base.HEX)

local fields = {}
for _, v in pairs(f) do
	fields[#fields + 1] = v
end
metaroce.fields = fields

local ef = {
	short    = ProtoExpert.new("metaroce.malformed.short", "Packet shorter than its type's header and trailer", expert.group.MALFORMED, expert.severity.ERROR),
	version  = ProtoExpert.new("metaroce.malformed.version", "Unsupported MetaRoCE version", expert.group.MALFORMED, expert.severity.ERROR),
	type     = ProtoExpert.new("metaroce.malformed.type", "Unknown MetaRoCE packet type", expert.group.MALFORMED, expert.severity.ERROR),
	bad_crc  = ProtoExpert.new("metaroce.crc.bad", "CRC32C check failed (corrupted packet)", expert.group.CHECKSUM, expert.severity.ERROR),
	retx     = ProtoExpert.new("metaroce.retx", "Retransmission", expert.group.SEQUENCE, expert.severity.NOTE),
	ece      = ProtoExpert.new("metaroce.ece", "Congestion experienced on this path", expert.group.SEQUENCE, expert.severity.NOTE),
	sinks    = ProtoExpert.new("metaroce.malformed.sinks", "READ request sink list is not 1..4 entries of 16 bytes", expert.group.MALFORMED, expert.severity.ERROR),
	range_   = ProtoExpert.new("metaroce.malformed.range", "Payload extends past the message length", expert.group.MALFORMED, expert.severity.ERROR),
}
metaroce.experts = { ef.short, ef.version, ef.type, ef.bad_crc, ef.retx, ef.ece, ef.sinks, ef.range_ }

metaroce.prefs.port = Pref.uint("UDP port", DEFAULT_PORT, "UDP destination port of MetaRoCE packets")
metaroce.prefs.check_crc = Pref.bool("Verify CRC32C", true, "Compute and check the CRC32C trailer")

---------------------------------------------------------------------------
-- CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as Go's
-- crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)).

local crc_table = {}
for i = 0, 255 do
	local c = i
	for _ = 1, 8 do
		if band(c, 1) ~= 0 then
			c = bxor(rshift(c, 1), 0x82F63B78)
		else
			c = rshift(c, 1)
		end
	end
	crc_table[i] = c
end

local function crc32c(ba, n)
	local crc = 0xFFFFFFFF
	for i = 0, n - 1 do
		crc = bxor(rshift(crc, 8), crc_table[band(bxor(crc, ba:get_index(i)), 0xFF)])
	end
	return u32(bxor(crc, 0xFFFFFFFF))
end

---------------------------------------------------------------------------
-- Helpers

local function flag_names(fl)
	local names = {}
	if band(fl, 0x80) ~= 0 then names[#names + 1] = "FIRST" end
	if band(fl, 0x40) ~= 0 then names[#names + 1] = "LAST" end
	if band(fl, 0x20) ~= 0 then names[#names + 1] = "ACKREQ" end
	if band(fl, 0x10) ~= 0 then names[#names + 1] = "RETX" end
	if band(fl, 0x08) ~= 0 then names[#names + 1] = "IMM" end
	if band(fl, 0x04) ~= 0 then names[#names + 1] = "ABORT" end
	if band(fl, 0x02) ~= 0 then names[#names + 1] = "ECE" end
	if band(fl, 0x01) ~= 0 then names[#names + 1] = "BUSY" end
	return table.concat(names, ",")
end

-- SACK bit i (MSB of byte 0 is i = 0) set means PSN cack+1+i arrived.
-- Returns the list of acknowledged PSNs and their compact text form.
local function sacked(tvb, off, cack)
	local psns = {}
	for byte = 0, 31 do
		local v = tvb(off + byte, 1):uint()
		if v ~= 0 then
			for bitn = 0, 7 do
				if band(v, rshift(0x80, bitn)) ~= 0 then
					local i = byte * 8 + bitn
					psns[#psns + 1] = (cack + 1 + i) % 4294967296
				end
			end
		end
	end
	local parts = {}
	local i = 1
	while i <= #psns do
		local j = i
		while j < #psns and psns[j + 1] == (psns[j] + 1) % 4294967296 do
			j = j + 1
		end
		if j == i then
			parts[#parts + 1] = tostring(psns[i])
		else
			parts[#parts + 1] = psns[i] .. "-" .. psns[j]
		end
		i = j + 1
	end
	return psns, "{" .. table.concat(parts, ",") .. "}"
end

---------------------------------------------------------------------------
-- Type bodies: each adds its fields and returns a summary for the Info
-- column.

local function dissect_data(tvb, t, typ, fl, body_len)
	t:add(f.stream, tvb(16, 2))
	t:add(f.stream_prev, tvb(18, 2))
	t:add(f.msn, tvb(20, 4))
	t:add(f.msn_base, tvb(24, 4))
	t:add(f.dsn, tvb(28, 4))
	t:add(f.msg_len, tvb(32, 4))
	t:add(f.offset, tvb(36, 4))
	t:add(f.addr, tvb(40, 8))
	t:add(f.key, tvb(48, 4))
	t:add(f.token, tvb(52, 4))
	t:add(f.imm, tvb(56, 4))
	t:add(f.demand, tvb(60, 4))
	local plen = body_len - 64
	t:add(f.payload_len, plen):set_generated()
	local msn, off, mlen = tvb(20, 4):uint(), tvb(36, 4):uint(), tvb(32, 4):uint()
	if typ == 3 then
		-- READ request: the payload is the requester's sink list.
		if band(fl, 0x04) == 0 and (plen == 0 or plen % 16 ~= 0 or plen > 64) then
			t:add_proto_expert_info(ef.sinks)
		end
		local n = math.floor(plen / 16)
		for i = 0, n - 1 do
			local o = 64 + i * 16
			local st = t:add(f.sink, tvb(o, 16))
			st:set_text(string.format("Sink %d: addr 0x%s len %d", i, tvb(o, 8):uint64():tohex(), tvb(o + 8, 4):uint()))
			st:add(f.sink_addr, tvb(o, 8))
			st:add(f.sink_len, tvb(o + 8, 4))
			st:add(f.sink_lkey, tvb(o + 12, 4))
		end
		return string.format("msn %d len %d", msn, mlen)
	end
	if off + plen > mlen then
		t:add_proto_expert_info(ef.range_)
	end
	if plen > 0 then
		t:add(f.payload, tvb(64, plen))
	end
	return string.format("msn %d off %d/%d len %d", msn, off, mlen, plen)
end

local function dissect_ack(tvb, t, cack, body_len)
	t:add(f.cack, tvb(8, 4))
	t:add(f.echo_ts, tvb(16, 4))
	t:add(f.ce_count, tvb(20, 2))
	t:add(f.rx_count, tvb(22, 2))
	local ht = t:add(f.rate_hint, tvb(24, 4))
	t:add(f.ack_records, tvb(28, 1))
	t:add(f.ack_rsvd, tvb(29, 3))
	local st = t:add(f.sack, tvb(32, 32))
	local psns, text = sacked(tvb, 32, cack)
	st:add(f.sack_count, #psns):set_generated()
	st:add(f.sack_set, text):set_generated()
	for _, p in ipairs(psns) do
		st:add(f.sacked_psn, p):set_generated()
	end
	-- Further path records: 16 bytes each, 48 with a SACK vector.
	local off, nrec = 64, tvb(28, 1):uint()
	for i = 1, nrec do
		if off + 16 > body_len then
			t:add_proto_expert_info(ef.short)
			break
		end
		local rfl = tvb(off + 2, 1):uint()
		local size = 16
		if band(rfl, 0x01) ~= 0 then
			size = 48
		end
		if off + size > body_len then
			t:add_proto_expert_info(ef.short)
			break
		end
		local rt = t:add(f.rec, tvb(off, size))
		rt:append_text(string.format(" %d: path %d/%d cack %d", i, tvb(off, 1):uint(), tvb(off + 1, 1):uint(), tvb(off + 4, 4):uint()))
		rt:add(f.rec_path, tvb(off, 1))
		rt:add(f.rec_gen, tvb(off + 1, 1))
		local ft = rt:add(f.rec_flags, tvb(off + 2, 1))
		ft:add(f.rec_fl_sack, tvb(off + 2, 1))
		ft:add(f.rec_fl_ece, tvb(off + 2, 1))
		rt:add(f.rec_rsvd, tvb(off + 3, 1))
		rt:add(f.rec_cack, tvb(off + 4, 4))
		rt:add(f.rec_echo_ts, tvb(off + 8, 4))
		rt:add(f.rec_ce, tvb(off + 12, 2))
		rt:add(f.rec_rx, tvb(off + 14, 2))
		if size == 48 then
			local rs = rt:add(f.rec_sack, tvb(off + 16, 32))
			local _, rtext = sacked(tvb, off + 16, tvb(off + 4, 4):uint())
			rs:add(f.rec_sack_set, rtext):set_generated()
		end
		off = off + size
	end
	local hint = tvb(24, 4):uint()
	local hs = "none"
	if hint ~= 0xFFFFFFFF then
		hs = string.format("%.3g Gb/s", hint * 8e3 / 1e9)
		ht:append_text(" (" .. hs .. ")")
	else
		ht:append_text(" (no hint)")
	end
	local more = ""
	if nrec > 0 then
		more = string.format(" +%d paths", nrec)
	end
	return string.format("cack %d sack %s hint %s%s", cack, text, hs, more)
end

local function dissect_nak(tvb, t)
	t:add(f.nak_reason, tvb(16, 1))
	t:add(f.nak_rsvd, tvb(17, 1))
	t:add(f.nak_stream, tvb(18, 2))
	t:add(f.nak_msn, tvb(20, 4))
	t:add(f.nak_dsn, tvb(24, 4))
	t:add(f.nak_echo_ts, tvb(28, 4))
	local r = tvb(16, 1):uint()
	return string.format("%s msn %d", nak_reasons[r] or ("reason " .. r), tvb(20, 4):uint())
end

local function dissect_setup(tvb, t)
	t:add(f.src_conn, tvb(16, 4))
	t:add(f.ack_delay, tvb(20, 4))
	t:add(f.nonce, tvb(24, 8))
	t:add(f.paths, tvb(32, 2))
	t:add(f.ports, tvb(34, 1))
	t:add(f.setup_rsvd2, tvb(35, 1))
	t:add(f.mtu, tvb(36, 2))
	t:add(f.msg_window, tvb(38, 2))
	t:add(f.dsn_window, tvb(40, 4))
	t:add(f.line_rate, tvb(44, 4))
	t:add(f.service, tvb(48, 2))
	t:add(f.setup_rsvd3, tvb(50, 2))
	return string.format("src conn %d paths %d ports %d mtu %d", tvb(16, 4):uint(), tvb(32, 2):uint(),
		tvb(34, 1):uint(), tvb(36, 2):uint())
end

---------------------------------------------------------------------------
-- The dissector.

function metaroce.dissector(tvb, pinfo, tree)
	local n = tvb:reported_length_remaining()
	pinfo.cols.protocol = "MetaRoCE"
	local t = tree:add(metaroce, tvb())
	if n < 16 + TRAILER then
		t:add_proto_expert_info(ef.short)
		pinfo.cols.info:set("MetaRoCE [short packet]")
		return n
	end
	t:add(f.version, tvb(0, 1))
	t:add(f.type, tvb(0, 1))
	local ver = rshift(tvb(0, 1):uint(), 4)
	local typ = band(tvb(0, 1):uint(), 0x0F)
	local fl = tvb(1, 1):uint()
	local ft = t:add(f.flags, tvb(1, 1))
	ft:append_text(" (" .. flag_names(fl) .. ")")
	ft:add(f.fl_first, tvb(1, 1))
	ft:add(f.fl_last, tvb(1, 1))
	ft:add(f.fl_ackrq, tvb(1, 1))
	ft:add(f.fl_retx, tvb(1, 1))
	ft:add(f.fl_imm, tvb(1, 1))
	ft:add(f.fl_abort, tvb(1, 1))
	ft:add(f.fl_ece, tvb(1, 1))
	ft:add(f.fl_busy, tvb(1, 1))
	t:add(f.path, tvb(2, 1))
	t:add(f.gen, tvb(3, 1))
	t:add(f.dst_conn, tvb(4, 4))
	if typ ~= 5 then
		t:add(f.psn, tvb(8, 4))
	end
	t:add(f.ts, tvb(12, 4))

	local name = types[typ] or ("TYPE " .. typ)
	if ver ~= VERSION then
		t:add_proto_expert_info(ef.version)
		pinfo.cols.info:set(string.format("MetaRoCE version %d (not decoded)", ver))
		return n
	end
	if not min_size[typ] then
		t:add_proto_expert_info(ef.type)
		pinfo.cols.info:set("MetaRoCE " .. name)
		return n
	end
	local body_len = n - TRAILER
	if body_len < min_size[typ] then
		t:add_proto_expert_info(ef.short)
		pinfo.cols.info:set("MetaRoCE " .. name .. " [short]")
		return n
	end
	t:append_text(", " .. name)

	local path, gen, psn = tvb(2, 1):uint(), tvb(3, 1):uint(), tvb(8, 4):uint()
	local summary = ""
	if typ >= 1 and typ <= 4 then
		summary = dissect_data(tvb, t, typ, fl, body_len)
	elseif typ == 5 then
		summary = dissect_ack(tvb, t, psn, body_len)
	elseif typ == 6 then
		summary = dissect_nak(tvb, t)
	elseif typ == 8 or typ == 9 then
		summary = dissect_setup(tvb, t)
	end
	if band(fl, 0x10) ~= 0 then
		t:add_proto_expert_info(ef.retx)
	end
	if band(fl, 0x02) ~= 0 then
		t:add_proto_expert_info(ef.ece)
	end

	-- Trailer.
	local crc_range = tvb(body_len, TRAILER)
	local ct = t:add(f.crc, crc_range)
	if metaroce.prefs.check_crc then
		local want = crc_range:uint()
		local got = crc32c(tvb(0, body_len):bytes(), body_len)
		ct:add(f.crc_calc, got):set_generated()
		if got == want then
			ct:add(f.crc_status, 1):set_generated()
			ct:append_text(" [correct]")
		else
			ct:add(f.crc_status, 0):set_generated()
			ct:append_text(" [incorrect]")
			ct:add_proto_expert_info(ef.bad_crc)
			summary = summary .. " [BAD CRC]"
		end
	end

	local where = string.format("%s path %d/%d", name, path, gen)
	if typ ~= 5 then
		where = where .. " psn " .. psn
	end
	local flags = flag_names(fl)
	if flags ~= "" then
		flags = " [" .. flags .. "]"
	end
	pinfo.cols.info:set(string.format("%s conn %d %s%s", where, tvb(4, 4):uint(), summary, flags))
	return n
end

---------------------------------------------------------------------------
-- Registration on the UDP port (a preference).

local udp_port = DissectorTable.get("udp.port")
local registered = DEFAULT_PORT
udp_port:add(registered, metaroce)

function metaroce.prefs_changed()
	if metaroce.prefs.port ~= registered then
		udp_port:remove(registered, metaroce)
		registered = metaroce.prefs.port
		udp_port:add(registered, metaroce)
	end
end
