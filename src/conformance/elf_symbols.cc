#include "conformance/elf_symbols.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"

namespace rayaccel::conformance {

absl::StatusOr<std::vector<std::string>> ExportedSymbols(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
  };
  if (data.size() < sizeof(Elf64_Ehdr) || std::memcmp(data.data(), ELFMAG, SELFMAG) != 0) {
    return bad("not an ELF file");
  }
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof(eh));
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return bad("not a 64-bit little-endian ELF file");
  }
  // Every offset read below is checked against the file size first.
  auto in_file = [&](uint64_t offset, uint64_t size) {
    return offset <= data.size() && size <= data.size() - offset;
  };
  if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
      !in_file(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
    return bad("malformed section table");
  }
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), data.data() + eh.e_shoff, sections.size() * sizeof(Elf64_Shdr));
  std::vector<std::string> out;
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= sections.size() ||
        !in_file(sh.sh_offset, sh.sh_size)) {
      return bad("malformed .dynsym");
    }
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    if (!in_file(strtab.sh_offset, strtab.sh_size)) return bad("malformed .dynstr");
    for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, data.data() + sh.sh_offset + off, sizeof(sym));
      unsigned bind = ELF64_ST_BIND(sym.st_info);
      unsigned vis = ELF64_ST_VISIBILITY(sym.st_other);
      if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0) continue;
      if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
      if (vis != STV_DEFAULT && vis != STV_PROTECTED) continue;
      if (sym.st_name >= strtab.sh_size) return bad("symbol name outside .dynstr");
      const char* name = data.data() + strtab.sh_offset + sym.st_name;
      size_t max = strtab.sh_size - sym.st_name;
      out.emplace_back(name, strnlen(name, max));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace rayaccel::conformance
