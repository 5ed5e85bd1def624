fn main() {
    println!("ksync-lab");
}
