package fenceredis

import (
	"strconv"
	"strings"
	"sync"
)

// Redis Cluster key slots, for names that must share a slot with a key
// fenceredis does not choose (the Guard's records).

// slotTag returns a string without braces that Redis Cluster hashes to
// the same slot as key.
func slotTag(key string) string {
	h := hashed(key)
	if !strings.ContainsRune(h, '}') {
		return h
	}
	return tagOfSlot(crc16(h) % 16384)
}

// hashed returns the part of key that Redis Cluster hashes: the content of
// the first {...} if it is not empty, else all of key.
func hashed(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

var slotTags sync.Map // slot -> string

// tagOfSlot returns the smallest decimal number whose hash slot is slot.
func tagOfSlot(slot uint16) string {
	if t, ok := slotTags.Load(slot); ok {
		return t.(string)
	}
	for n := 0; ; n++ {
		t := strconv.Itoa(n)
		if crc16(t)%16384 == slot {
			slotTags.Store(slot, t)
			return t
		}
	}
}

// crc16 is CRC-16/XMODEM, the hash of Redis Cluster's key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
