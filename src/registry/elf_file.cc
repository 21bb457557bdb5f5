#include "registry/elf_file.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace rayaccel {
namespace {

// An ELF file mapped read-only (only the pages read are touched: a plugin with debug info is
// megabytes, of which a few kilobytes matter here), every offset checked against its size
// before it is read.
class Elf {
 public:
  static absl::StatusOr<std::unique_ptr<Elf>> Read(const std::string& path) {
    std::unique_ptr<Elf> elf(new Elf());
    elf->path_ = path;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
      close(fd);
      return elf->Bad("not a regular file");
    }
    elf->size_ = static_cast<size_t>(st.st_size);
    void* at = mmap(nullptr, elf->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (at == MAP_FAILED) return absl::NotFoundError(absl::StrCat(path, ": cannot be mapped"));
    elf->data_ = static_cast<const char*>(at);
    if (elf->size_ < sizeof(Elf64_Ehdr) || std::memcmp(elf->data_, ELFMAG, SELFMAG) != 0) {
      return elf->Bad("not an ELF file");
    }
    Elf64_Ehdr eh = elf->At<Elf64_Ehdr>(0);
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB) {
      return elf->Bad("not a 64-bit little-endian ELF file");
    }
    if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !elf->InFile(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
      return elf->Bad("malformed section table");
    }
    elf->sections_.resize(eh.e_shnum);
    std::memcpy(elf->sections_.data(), elf->data_ + eh.e_shoff,
                elf->sections_.size() * sizeof(Elf64_Shdr));
    return elf;
  }
  ~Elf() {
    if (data_ != nullptr) munmap(const_cast<char*>(data_), size_);
  }
  Elf(const Elf&) = delete;
  Elf& operator=(const Elf&) = delete;

  absl::Status Bad(const char* why) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", why));
  }
  bool InFile(uint64_t offset, uint64_t size) const {
    return offset <= size_ && size <= size_ - offset;
  }
  const std::vector<Elf64_Shdr>& sections() const { return sections_; }
  template <typename T>
  T At(uint64_t offset) const {
    T t;
    std::memcpy(&t, data_ + offset, sizeof(t));
    return t;
  }
  // A NUL-terminated string at `offset` of the string table `strtab` (checked).
  absl::StatusOr<std::string> String(const Elf64_Shdr& strtab, uint64_t offset) const {
    if (!InFile(strtab.sh_offset, strtab.sh_size) || offset >= strtab.sh_size) {
      return Bad("string outside its table");
    }
    const char* s = data_ + strtab.sh_offset + offset;
    return std::string(s, strnlen(s, strtab.sh_size - offset));
  }

 private:
  Elf() = default;
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
  std::vector<Elf64_Shdr> sections_;
};

}  // namespace

absl::StatusOr<std::vector<std::string>> ExportedSymbols(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Elf>> read = Elf::Read(path);
  if (!read.ok()) return read.status();
  const Elf* elf = read->get();
  const std::vector<Elf64_Shdr>& sections = elf->sections();
  std::vector<std::string> out;
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNSYM) continue;
    if (sh.sh_entsize != sizeof(Elf64_Sym) || sh.sh_link >= sections.size() ||
        !elf->InFile(sh.sh_offset, sh.sh_size)) {
      return elf->Bad("malformed .dynsym");
    }
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    for (uint64_t off = 0; off + sizeof(Elf64_Sym) <= sh.sh_size; off += sizeof(Elf64_Sym)) {
      Elf64_Sym sym = elf->At<Elf64_Sym>(sh.sh_offset + off);
      unsigned bind = ELF64_ST_BIND(sym.st_info);
      unsigned vis = ELF64_ST_VISIBILITY(sym.st_other);
      if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0) continue;
      if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) continue;
      if (vis != STV_DEFAULT && vis != STV_PROTECTED) continue;
      absl::StatusOr<std::string> name = elf->String(strtab, sym.st_name);
      if (!name.ok()) return elf->Bad("symbol name outside .dynstr");
      out.push_back(*std::move(name));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::vector<std::string>> LibrarySearchPath(const std::string& path) {
  absl::StatusOr<std::unique_ptr<Elf>> read = Elf::Read(path);
  if (!read.ok()) return read.status();
  const Elf* elf = read->get();
  const std::vector<Elf64_Shdr>& sections = elf->sections();
  const std::string origin =
      path.substr(0, path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
  std::vector<std::string> out;
  for (const Elf64_Shdr& sh : sections) {
    if (sh.sh_type != SHT_DYNAMIC) continue;
    if (sh.sh_entsize != sizeof(Elf64_Dyn) || sh.sh_link >= sections.size() ||
        !elf->InFile(sh.sh_offset, sh.sh_size)) {
      return elf->Bad("malformed .dynamic");
    }
    const Elf64_Shdr& strtab = sections[sh.sh_link];
    for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= sh.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn dyn = elf->At<Elf64_Dyn>(sh.sh_offset + off);
      if (dyn.d_tag == DT_NULL) break;
      if (dyn.d_tag != DT_RUNPATH && dyn.d_tag != DT_RPATH) continue;
      absl::StatusOr<std::string> list = elf->String(strtab, dyn.d_un.d_val);
      if (!list.ok()) return elf->Bad("RUNPATH outside .dynstr");
      for (absl::string_view dir : absl::StrSplit(*list, ':', absl::SkipEmpty())) {
        out.push_back(absl::StrReplaceAll(dir, {{"${ORIGIN}", origin}, {"$ORIGIN", origin}}));
      }
    }
  }
  return out;
}

}  // namespace rayaccel
