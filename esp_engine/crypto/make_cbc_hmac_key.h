// Each backend's AES-CBC + HMAC key constructor (engine-internal; CryptoBackend is the
// public way in). Both check the lengths and throw std::invalid_argument.
#pragma once

#include <memory>
#include <span>

#include "crypto/cbc_hmac.h"

namespace espgw::crypto {

std::unique_ptr<CbcHmacKey> make_ipsec_mb_cbc_hmac_key(EncryptionAlgorithm cipher,
                                                       IntegrityAlgorithm integrity,
                                                       std::span<const uint8_t> encryption_key,
                                                       std::span<const uint8_t> integrity_key);
std::unique_ptr<CbcHmacKey> make_openssl_cbc_hmac_key(EncryptionAlgorithm cipher,
                                                      IntegrityAlgorithm integrity,
                                                      std::span<const uint8_t> encryption_key,
                                                      std::span<const uint8_t> integrity_key);
// The common length and pairing check both constructors start with.
void check_cbc_hmac_lengths(EncryptionAlgorithm cipher, IntegrityAlgorithm integrity,
                            size_t encryption_key_length, size_t integrity_key_length);

}  // namespace espgw::crypto
