// Published ESP test vectors, transcribed from the documents below and
// checked by recomputing every packet with an independent AEAD implementation.
//
// Sources:
//  * "draft-mcgrew-gcm-test-01 case N": D. McGrew, "Test Cases for the use of
//    Galois/Counter Mode (GCM) and Galois Message Authentication Code (GMAC) in
//    IPsec ESP", draft-mcgrew-gcm-test-01, March 2009, Section 4.  The draft does
//    not number its cases; N is the position of the case in Section 4 (1..17).
//    Case 7 (AES-192) and case 15 (AES-GMAC-ESP, RFC 4543) are not included.
//    The draft lists "key" (AES key only) and "nonce" (= Salt || IV, RFC 4106);
//    here key_hex is key || Salt and iv_hex is the last 8 bytes of the nonce.
//    Where the draft gives an 8-octet "seq" it is an Extended Sequence Number
//    and the AAD is SPI || seq-high || seq-low (esn = true); only seq-low is
//    carried in the packet.
//    Note: every case in the draft uses Next Header = 1 in the ESP trailer,
//    even when the plaintext starts with an IPv4 header, and several inner
//    "packets" are not well-formed IP (their total length does not match).
//  * "RFC 7634 Appendix A": Y. Nir, "ChaCha20, Poly1305, and Their Use in the
//    Internet Key Exchange Protocol (IKE) and IPsec", RFC 7634, August 2015,
//    Appendix A (ESP Example).  KEYMAT = 32-byte key || 4-byte salt.  The wire
//    packet there also has a 20-byte outer IPv4 header, which is omitted here.
#pragma once

#include <cstdint>

namespace espgw::test {

struct PublishedEspVector {
  // e.g. "draft-mcgrew-gcm-test-01 case 2"
  const char* name;
  // "aes-gcm-128", "aes-gcm-256" or "chacha20-poly1305"
  const char* algorithm;
  // The cipher key followed by the 4-byte salt, as strongSwan hands it over (20 bytes for
  // AES-128, 36 for AES-256 and ChaCha20).
  const char* key_hex;
  uint32_t spi;
  // The full 64-bit sequence number (high 32 bits nonzero only for ESN cases).
  uint64_t seq;
  // True when the AAD is SPI || seq-high || seq-low (12 bytes).
  bool esn;
  // The 8-byte explicit IV carried in the packet.
  const char* iv_hex;
  // What gets encrypted: inner packet + padding + pad length + next header.
  const char* plaintext_hex;
  // The ESP packet as on the wire after the outer IP header: SPI, seq-low, IV,
  // ciphertext, 16-byte ICV.
  const char* esp_packet_hex;
};

inline constexpr PublishedEspVector kPublishedEspVectors[] = {
    {
        "draft-mcgrew-gcm-test-01 case 1",
        "aes-gcm-128",
        "4c80cdefbb5d10da906ac73c3613a634"
        "2e443b68",
        0x00004321u,
        0x8765432100000000ull,
        true,
        "4956ed7e3b244cfe",
        "45000048699a000080114db7c0a80102"
        "c0a801010a9bf15638d3010000010000"
        "00000000045f736970045f7564700373"
        "69700963796265726369747902646b00"
        "0021000101020201",
        "00004321000000004956ed7e3b244cfe"
        "fecf537e729d5b07dc30df528dd22b76"
        "8d1b98736696a6fd348509fa13ceac34"
        "cfa2436f14a3f3cf65925bf1f4a13c5d"
        "15b21e1884f5ff6247aeabb786b93bce"
        "61bc17d768fd9732459018148f6cbe72"
        "2fd04796562dfdb4",
    },
    {
        "draft-mcgrew-gcm-test-01 case 2",
        "aes-gcm-128",
        "feffe9928665731c6d6a8f9467308308"
        "cafebabe",
        0x0000a5f8u,
        0x000000000000000aull,
        false,
        "facedbaddecaf888",
        "4500003e698f000080114dccc0a80102"
        "c0a801010a980035002a2343b2d00100"
        "00010000000000000373697009637962"
        "65726369747902646b00000100010001",
        "0000a5f80000000afacedbaddecaf888"
        "deb22cd9b07c72c16e3a65beeb8df304"
        "a5a5897d33ae530f1ba76d5d114d2a5c"
        "3de81827c10e9a4f51330d0eec416642"
        "cfbb85a5b47e48a4ec3b9ba95d918bd1"
        "83b70d3aa8bc6ee4c309e9d85a41ad4a",
    },
    {
        "draft-mcgrew-gcm-test-01 case 3",
        "aes-gcm-256",
        "abbccddef00112233445566778899aab"
        "abbccddef00112233445566778899aab"
        "11223344",
        0x4a2cbfe3u,
        0x0000000000000002ull,
        false,
        "0102030405060708",
        "4500003069a6400080062690c0a80102"
        "9389155e0a9e008b2dc57ee000000000"
        "7002400020bf0000020405b401010402"
        "01020201",
        "4a2cbfe3000000020102030405060708"
        "ff425c9b724599df7a3bcd510194e00d"
        "6a78107f1b0b1cbf06efae9d65a5d763"
        "748a637985771d347f0545659f14e99d"
        "ef842d8eb335f4eecfdbf831824b4c49"
        "15956c96",
    },
    {
        "draft-mcgrew-gcm-test-01 case 4",
        "aes-gcm-128",
        "00000000000000000000000000000000"
        "00000000",
        0x00000000u,
        0x0000000000000001ull,
        false,
        "0000000000000000",
        "4500003c99c500008001cb7a40679318"
        "010101010800075c0200440061626364"
        "65666768696a6b6c6d6e6f7071727374"
        "75767761626364656667686901020201",
        "00000000000000010000000000000000"
        "4688daf2f973a392732909c331d56d60"
        "f694abaa414b5e7ff5fdcdfff5e9a284"
        "456476492719ffb64de7d9dca1e1d894"
        "bc3bd57873ed4d181d19d4d5c8c18af3"
        "f821d496eeb096e98ad2b69e4799c71d",
    },
    {
        "draft-mcgrew-gcm-test-01 case 5",
        "aes-gcm-128",
        "3de09874b388e6491988d0c3607eae1f"
        "57690e43",
        0x42f67e3fu,
        0x1010101010101010ull,
        true,
        "4e280000a2fca1a3",
        "4500003c99c300008001cb7c40679318"
        "010101010800085c0200430061626364"
        "65666768696a6b6c6d6e6f7071727374"
        "75767761626364656667686901020201",
        "42f67e3f101010104e280000a2fca1a3"
        "fba2caa4853cf9f0f22cb10d86dd83b0"
        "fec75691cf1a04b00d1138ec9c357917"
        "65acbd8701ad79845bf9fe3fba487bc9"
        "1755e6662b4c8d0d1f5e22739530320a"
        "e0d731cc978ecafaeae88f00e80d6e48",
    },
    {
        "draft-mcgrew-gcm-test-01 case 6",
        "aes-gcm-128",
        "3de09874b388e6491988d0c3607eae1f"
        "57690e43",
        0x42f67e3fu,
        0x1010101010101010ull,
        true,
        "4e280000a2fca1a3",
        "4500001c42a200008001441f406793b6"
        "e00000020a00f5ff01020201",
        "42f67e3f101010104e280000a2fca1a3"
        "fba2ca845e5df9f0f22c3e6e86dd831e"
        "1fc65792cd1af9130e1379ed369f071f"
        "35e034be95f112e4e7d05d35",
    },
    {
        "draft-mcgrew-gcm-test-01 case 8",
        "aes-gcm-128",
        "abbccddef00112233445566778899aab"
        "decaf888",
        0x00000100u,
        0x0000000000000001ull,
        true,
        "cafedebaceface74",
        "4500004933ba00007f119106c3fb1d10"
        "c2b1d326c02831ce0035dd7b800302d5"
        "00004e20001e8c18d75b81dc91baa047"
        "6b91b924b280389d92c963bac046ec95"
        "9b6266c04722b14923010101",
        "0000010000000001cafedebaceface74"
        "18a6fd42f72cbf4ab2a2ea901f73d814"
        "e3e7f243d95412e1c349c1d2fbec168f"
        "9190feebaf2cb01984e65863965d7472"
        "b79da345e0e780191f0d2f0e0f496c22"
        "6f2127b27db35724e7845d68651f57e6"
        "5f354f75ff17015769623436",
    },
    {
        "draft-mcgrew-gcm-test-01 case 9",
        "aes-gcm-256",
        "abbccddef00112233445566778899aab"
        "abbccddef00112233445566778899aab"
        "73616c74",
        0x17405e67u,
        0x156f3126dd0db99bull,
        true,
        "616e640169766563",
        "45080028732c00004006e9f90a010612"
        "0a01038f06b88023dd6bafbecb712602"
        "50101f646d540001",
        "17405e67dd0db99b616e640169766563"
        "f2d69ecdbd5a0d5b8d5ef38bad4da58d"
        "1f278fde98ef67549d524a3018d9a57f"
        "f4d3a31ce673119e451626c2415771e3"
        "b7eebca614c89b35",
    },
    {
        "draft-mcgrew-gcm-test-01 case 10",
        "aes-gcm-128",
        "3de09874b388e6491988d0c3607eae1f"
        "57690e43",
        0x42f67e3fu,
        0x1010101010101010ull,
        true,
        "4e280000a2fca1a3",
        "45000049333e00007f119182c3fb1d10"
        "c2b1d326c02831ce0035cb458003025b"
        "000001e0001e8c18d65759d52284a035"
        "2c71475c8880391c764d6e5ee0496b32"
        "5ae270c03899493915010101",
        "42f67e3f101010104e280000a2fca1a3"
        "fba2cad12fc1f9f00d3cebf305410db8"
        "3d7784b607323d220f24b0a97d541828"
        "00cadb0f68d99ef0e0c0c89ae9bea888"
        "4e52d65bc1afd0740f742444747b5b39"
        "ab533163aad4550ee5160975cdb608c5"
        "769189609763b8e18caa81e2",
    },
    {
        "draft-mcgrew-gcm-test-01 case 11",
        "aes-gcm-256",
        "abbccddef00112233445566778899aab"
        "abbccddef00112233445566778899aab"
        "73616c74",
        0x17405e67u,
        0x156f3126dd0db99bull,
        true,
        "616e640169766563",
        "636973636f0172756c65730174686501"
        "6e6574776501646566696e6501746865"
        "746563686e6f6c6f6769657301746861"
        "7477696c6c01646566696e65746f6d6f"
        "72726f7701020201",
        "17405e67dd0db99b616e640169766563"
        "d4b7ed86a1777f2ea13d6973d324c69e"
        "7b43f826fb56831226508bebd2dceb18"
        "d0a6df10e5487df074113e14c641024e"
        "3e6773d91a62ee429b043a10e3efe6b0"
        "12a49363412364f8c0cac587f249e56b"
        "11e24f30e44ccc76",
    },
    {
        "draft-mcgrew-gcm-test-01 case 12",
        "aes-gcm-128",
        "7d773d00c144c525ac619d18c84a3f47"
        "d9664267",
        0x335467aeu,
        0x00000000ffffffffull,
        false,
        "43457e9182443bc6",
        "01020201",
        "335467aeffffffff43457e9182443bc6"
        "437f866bcb3f699fe9b0822bac961c45"
        "04bef270",
    },
    {
        "draft-mcgrew-gcm-test-01 case 13",
        "aes-gcm-128",
        "abbccddef00112233445566778899aab"
        "decaf888",
        0x00000100u,
        0x0000000000000001ull,
        true,
        "cafedebaceface74",
        "746f016265016f72016e6f7401746f01"
        "62650001",
        "0000010000000001cafedebaceface74"
        "29c9fc69a197d038ccdd14e2ddfcaa05"
        "43332164412503524303ed3c6c5f2838"
        "43af8c3e",
    },
    {
        "draft-mcgrew-gcm-test-01 case 14",
        "aes-gcm-256",
        "6c6567616c697a656d6172696a75616e"
        "61616e64646f69746265666f72656961"
        "7475726e",
        0x796b6963u,
        0xffffffffffffffffull,
        true,
        "333021696765746d",
        "45000030da3a00008001df3bc0a80005"
        "c0a800010800c6cd0200070061626364"
        "65666768696a6b6c6d6e6f7071727374"
        "01020201",
        "796b6963ffffffff333021696765746d"
        "f97ab2aa356d8edce17644ac8c78e25d"
        "d24dedbb29ebf1b64a274b39b49c3a86"
        "4cd3d78ca4ae68a32b42458fb57dbe82"
        "1dcc63b9d0937ba2945f669368661a32"
        "9fb4c053",
    },
    {
        "draft-mcgrew-gcm-test-01 case 16",
        "aes-gcm-128",
        "3de09874b388e6491988d0c3607eae1f"
        "57690e43",
        0x3f7ef642u,
        0x1010101010101010ull,
        true,
        "4e280000a2fca1a3",
        "45000030da3a00008001df3bc0a80005"
        "c0a800010800c6cd0200070061626364"
        "65666768696a6b6c6d6e6f7071727374"
        "01020201",
        "3f7ef642101010104e280000a2fca1a3"
        "fba2caa8c6c5f9f0f22ca54a061210ad"
        "3f6e5791cf1aca210d117cec9c357917"
        "65acbd8701ad79845bf9fe3fba487bc9"
        "6321930684eecadb56912546e7a95c97"
        "40d7cb05",
    },
    {
        "draft-mcgrew-gcm-test-01 case 17",
        "aes-gcm-128",
        "4c80cdefbb5d10da906ac73c3613a634"
        "22433c64",
        0x00004321u,
        0x8765432100000007ull,
        true,
        "4855ec7d3a234bfd",
        "0800c6cd020007006162636465666768"
        "696a6b6c6d6e6f707172737401020201",
        "00004321000000074855ec7d3a234bfd"
        "74752e8aeb5d873cd7c0f4acc36c4bff"
        "84b7d7b98f0ca8b6acda6894bc619069"
        "ef9cbc28fe1b56a7c4e0d58c86cd2bc0",
    },
    {
        "RFC 7634 Appendix A",
        "chacha20-poly1305",
        "808182838485868788898a8b8c8d8e8f"
        "909192939495969798999a9b9c9d9e9f"
        "a0a1a2a3",
        0x01020304u,
        0x0000000000000005ull,
        false,
        "1011121314151617",
        "45000054a6f200004001e778c6336405"
        "c000020508005b7a3a080000553bec10"
        "0007362708090a0b0c0d0e0f10111213"
        "1415161718191a1b1c1d1e1f20212223"
        "2425262728292a2b2c2d2e2f30313233"
        "3435363701020204",
        "01020304000000051011121314151617"
        "24039428b97f417e3c13753a4f05087b"
        "67c352e6a7fab1b982d466ef407ae5c6"
        "14ee8099d52844eb61aa95dfab4c02f7"
        "2aa71e7c4c4f64c9befe2facc638e8f3"
        "cbec163fac469b502773f6fb94e664da"
        "9165b82829f641e0"
        "76aaa8266b7fb0f7b11b369907e1ad43",
    },
};

}  // namespace espgw::test
