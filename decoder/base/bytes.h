/* Integers read from and written to byte buffers, in one place: big-endian (PostgreSQL's wire, the
 * subscriber socket's frames), little-endian (the spool's records) and the machine's own order
 * (records that never leave this process). Unaligned access is fine. */
#ifndef CDC_BYTES_H
#define CDC_BYTES_H

#include <stdint.h>
#include <string.h>

static inline uint16_t get_be16(const uint8_t *bytes)
{
	return (uint16_t)((unsigned)bytes[0] << 8 | bytes[1]);
}

static inline uint32_t get_be32(const uint8_t *bytes)
{
	return (uint32_t)bytes[0] << 24 | (uint32_t)bytes[1] << 16 | (uint32_t)bytes[2] << 8 | bytes[3];
}

static inline uint64_t get_be64(const uint8_t *bytes)
{
	return (uint64_t)get_be32(bytes) << 32 | get_be32(bytes + 4);
}

static inline void put_be32(uint8_t *bytes, uint32_t value)
{
	bytes[0] = (uint8_t)(value >> 24);
	bytes[1] = (uint8_t)(value >> 16);
	bytes[2] = (uint8_t)(value >> 8);
	bytes[3] = (uint8_t)value;
}

static inline void put_be64(uint8_t *bytes, uint64_t value)
{
	put_be32(bytes, (uint32_t)(value >> 32));
	put_be32(bytes + 4, (uint32_t)value);
}

static inline uint32_t get_le32(const uint8_t *bytes)
{
	return (uint32_t)bytes[3] << 24 | (uint32_t)bytes[2] << 16 | (uint32_t)bytes[1] << 8 | bytes[0];
}

static inline uint64_t get_le64(const uint8_t *bytes)
{
	return (uint64_t)get_le32(bytes) | (uint64_t)get_le32(bytes + 4) << 32;
}

static inline void put_le32(uint8_t *bytes, uint32_t value)
{
	bytes[0] = (uint8_t)value;
	bytes[1] = (uint8_t)(value >> 8);
	bytes[2] = (uint8_t)(value >> 16);
	bytes[3] = (uint8_t)(value >> 24);
}

static inline void put_le64(uint8_t *bytes, uint64_t value)
{
	put_le32(bytes, (uint32_t)value);
	put_le32(bytes + 4, (uint32_t)(value >> 32));
}

/* The machine's order, for records this process writes and reads back itself. */
static inline uint32_t load_u32(const void *bytes)
{
	uint32_t value;
	memcpy(&value, bytes, sizeof(value));
	return value;
}

static inline void store_u32(void *bytes, uint32_t value)
{
	memcpy(bytes, &value, sizeof(value));
}

static inline uint64_t load_u64(const void *bytes)
{
	uint64_t value;
	memcpy(&value, bytes, sizeof(value));
	return value;
}

static inline void store_u64(void *bytes, uint64_t value)
{
	memcpy(bytes, &value, sizeof(value));
}

#endif
